#pragma once
// A property check for fuzz targets: on failure, prints what broke and aborts, so
// libFuzzer records the input as a crash.
#include <cstdio>
#include <cstdlib>

#define CALSERVE_FUZZ_CHECK(cond, what)                                                   \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            std::fprintf(stderr, "fuzz check failed: %s (%s:%d): %s\n", #cond, __FILE__, \
                         __LINE__, what);                                                 \
            std::abort();                                                                 \
        }                                                                                 \
    } while (0)
