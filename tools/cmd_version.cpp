// `calserve version`: version and build information.
#include <CLI/CLI.hpp>
#include <boost/version.hpp>
#include <iostream>

#include "tools/command.hpp"

namespace calserve::tools::cmd_version {
namespace {
const bool registered = register_command("version", "print version and build info", [](CLI::App&) {
    return [] {
        std::cout << "calserve " << CALSERVE_VERSION << " (git " << CALSERVE_GIT_REV << ", " << CALSERVE_BUILD_TYPE
                  << ")\n"
                  << "compiler: " << __VERSION__ << ", C++ " << __cplusplus << "\n"
                  << "boost: " << BOOST_LIB_VERSION << "\n";
        return 0;
    };
});
}  // namespace
}  // namespace calserve::tools::cmd_version
