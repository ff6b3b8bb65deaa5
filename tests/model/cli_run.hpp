// Runs the calserve binary with arguments and collects its exit code and output
// (the CLI tests of packages and routing counts).
#pragma once

#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "tests/support/test_paths.hpp"

namespace calserve::test {

struct run_result {
    int exit_code = -1;
    std::string out;
};

// `stderr_to` is a shell redirection of the standard error: "2>&1" keeps it in `out`.
inline run_result run_calserve(const std::string& args, const std::string& stderr_to = "2>/dev/null") {
    const std::string cmd = calserve_binary().string() + " " + args + " " + stderr_to;
    run_result r;
    FILE* pipe = ::popen(cmd.c_str(), "r");
    REQUIRE(pipe != nullptr);
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) r.out.append(buf, n);
    const int status = ::pclose(pipe);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

}  // namespace calserve::test
