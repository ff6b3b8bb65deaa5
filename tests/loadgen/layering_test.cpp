// loadgen/ is a client of any OpenAI-compatible server, not part of the daemon:
// its project includes stay within loadgen/ and config/, and no daemon folder
// includes it (only soak/ and tools/ may). Read from the source tree.
#include <catch2/catch.hpp>
#include <fstream>
#include <regex>
#include <set>
#include <string>

#include "tests/support/test_paths.hpp"

namespace fs = std::filesystem;

namespace {

// Top-level folders named by the project includes of every source in `folder`.
std::set<std::string> included_folders(const std::string& folder) {
    static const std::regex include(R"re(^\s*#\s*include\s+"([A-Za-z0-9_]+)/)re");
    std::set<std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(calserve::test::source_dir() / folder)) {
        if (!e.is_regular_file()) continue;
        std::ifstream f(e.path());
        std::string line;
        std::smatch m;
        while (std::getline(f, line))
            if (std::regex_search(line, m, include)) out.insert(m[1]);
    }
    return out;
}

}  // namespace

TEST_CASE("loadgen depends on config only, and the daemon's folders not on loadgen", "[loadgen][layering]") {
    for (const auto& f : included_folders("loadgen")) {
        INFO(f);
        CHECK((f == "loadgen" || f == "config"));
    }
    for (const char* daemon : {"config", "io", "model", "device", "actors", "net"}) {
        INFO(daemon);
        CHECK(included_folders(daemon).count("loadgen") == 0);
    }
}
