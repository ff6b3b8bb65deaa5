// One JSON writer for what users and their programs read (config/json_text.hpp):
// boost::json::serialize prints every double in exponent form (`2.56E2`), which
// typed decoders expecting integers reject. The rooms that write answers, traces,
// reports and command output must not call it; model/ keeps it for package files
// whose bytes are hashed and whose numbers are integers and strings.
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "tests/support/test_paths.hpp"

namespace fs = std::filesystem;

TEST_CASE("output rooms write JSON through json_text, never boost::json::serialize", "[layering][json]") {
    const std::vector<std::string> rooms = {"actors", "engine", "io", "loadgen", "metrics", "net", "soak", "tools"};
    const auto root = calserve::test::source_dir();
    std::vector<std::string> found;
    for (const auto& room : rooms)
        for (const auto& e : fs::recursive_directory_iterator(root / room)) {
            const auto ext = e.path().extension();
            if (!e.is_regular_file() || (ext != ".cpp" && ext != ".hpp")) continue;
            std::ifstream in(e.path());
            std::string line;
            for (int n = 1; std::getline(in, line); ++n)
                if (line.find("json::serialize(") != std::string::npos)
                    found.push_back(fs::relative(e.path(), root).string() + ":" + std::to_string(n));
        }
    INFO("boost::json::serialize at: " << [&] {
        std::string s;
        for (const auto& f : found) s += "\n  " + f;
        return s;
    }());
    CHECK(found.empty());
}
