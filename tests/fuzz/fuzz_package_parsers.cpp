// libFuzzer entry point for the package parsers; each fuzz_<parser> executable is
// this file compiled with CALSERVE_FUZZ_<parser> defined. The property checked is
// the parsers' contract: any byte string yields a value or an error, never a
// crash, hang, out-of-bounds read or exception.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "model/package/commands.hpp"
#include "model/package/gguf.hpp"
#include "model/package/manifest.hpp"
#include "model/package/metadata.hpp"
#include "model/package/op_map.hpp"

namespace mp = calserve::model::package;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
#if defined(CALSERVE_FUZZ_manifest)
    (void)mp::parse_manifest(in, "/fuzz");
#elif defined(CALSERVE_FUZZ_op_map)
    (void)mp::parse_op_map_yaml(in);
#elif defined(CALSERVE_FUZZ_profparts)
    (void)mp::parse_profparts(in);
#elif defined(CALSERVE_FUZZ_commands_text)
    (void)mp::parse_commands_text(in);
#elif defined(CALSERVE_FUZZ_commands_binary)
    (void)mp::parse_commands_binary(in);
#elif defined(CALSERVE_FUZZ_elf)
    (void)mp::parse_elf(in);
#elif defined(CALSERVE_FUZZ_gguf)
    (void)mp::vocab_gguf_token_count(in);
#elif defined(CALSERVE_FUZZ_model_reservation)
    (void)mp::parse_model_reservation(in);
#elif defined(CALSERVE_FUZZ_submodel_info)
    (void)mp::parse_submodel_info(in);
#elif defined(CALSERVE_FUZZ_hparam)
    (void)mp::parse_hparam(in);
#elif defined(CALSERVE_FUZZ_model_yaml)
    (void)mp::parse_model_yaml(in);
#elif defined(CALSERVE_FUZZ_compile_config)
    (void)mp::parse_compile_config(in);
#elif defined(CALSERVE_FUZZ_version_py)
    (void)mp::parse_version_py(in);
#else
#error "define CALSERVE_FUZZ_<parser>"
#endif
    return 0;
}
