#pragma once
//! Second tier of assertion (first tier is static_assert between constants).
//! CALSERVE_INVARIANT(cond, msg) throws `invariant_violation`. Actor boundaries
//! catch it: in production the affected request or actor fails with
//! `status::internal` and the process lives on; in tests and deterministic
//! simulation the runtime records it as fatal so the test or seed fails.
#include <stdexcept>
#include <string>

namespace calserve {

class invariant_violation : public std::logic_error {
public:
    using std::logic_error::logic_error;
};

// The call site comes from the macro (__FILE__/__LINE__), not std::source_location,
// which clang 14 with libstdc++ 12 (the fuzz build) cannot compile.
[[noreturn]] void invariant_failed(const char* expr, const std::string& message, const char* file, int line);

}  // namespace calserve

#define CALSERVE_INVARIANT(cond, message)                                  \
    do {                                                                   \
        if (!(cond)) [[unlikely]] ::calserve::invariant_failed(#cond, (message), __FILE__, __LINE__); \
    } while (0)
