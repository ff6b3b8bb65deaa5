// The folder dependency graph (docs/architecture.md, "Rooms"): every project
// #include names a folder its own folder may depend on. The table below is the
// architecture; CMakeLists.txt's DEPS lists link the same graph. A new back edge
// (say model/ including device/, or actors/ including engine/) fails here with
// the file and the line, before it becomes a cycle nobody sees. Read from the
// source tree; tests/ may include anything.
#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/support/test_paths.hpp"

namespace fs = std::filesystem;

namespace {

// Each room and the rooms it may include directly (its own files always).
// Order: config -> io -> model/* -> device -> metrics -> actors/runtime -> actors
// -> engine -> net -> soak -> tools; loadgen beside net, on config only.
const std::map<std::string, std::vector<std::string>> k_allowed = {
    {"config", {}},
    {"io", {"config"}},
    {"model/core", {"config"}},
    {"model/weights", {"model/core", "io"}},
    {"model/cpu", {"model/weights"}},
    {"model/chat", {"config"}},
    {"model/tokenizer", {"model/chat", "model/weights"}},
    {"model/grammar", {"model/tokenizer"}},
    {"model/sampling", {"model/core"}},
    {"model/speculative", {"model/core"}},
    {"model/package", {"model/cpu"}},
    {"device", {"model/package", "model/sampling", "model/speculative"}},
    {"metrics", {"device"}},
    {"actors/runtime", {"config"}},
    {"actors", {"actors/runtime", "metrics", "model/sampling", "model/grammar", "model/speculative"}},
    {"engine", {"actors"}},
    {"net", {"engine"}},
    {"loadgen", {"config"}},
    {"soak", {"net", "loadgen"}},
    {"tools", {"soak"}},
};

// The room of a path like "model/core/bf16.hpp": the longest room that prefixes it.
std::string room_of(const std::string& path) {
    std::string best;
    for (const auto& [room, deps] : k_allowed)
        if (path.rfind(room + "/", 0) == 0 && room.size() > best.size()) best = room;
    return best;
}

// The transitive closure of k_allowed from `room`, itself included.
std::set<std::string> reachable(const std::string& room) {
    std::set<std::string> seen{room};
    std::vector<std::string> todo{room};
    while (!todo.empty()) {
        const auto r = todo.back();
        todo.pop_back();
        for (const auto& d : k_allowed.at(r))
            if (seen.insert(d).second) todo.push_back(d);
    }
    return seen;
}

struct include_line {
    std::string file, target;
    int line = 0;
};

// The project includes ("room/...") of every source under the tree's rooms.
std::vector<include_line> project_includes() {
    static const std::regex include(R"re(^\s*#\s*include\s+"([a-z_]+/[^"]+)")re");
    std::vector<include_line> out;
    const fs::path root = calserve::test::source_dir();
    for (const char* top : {"config", "io", "model", "device", "metrics", "actors", "engine", "net", "loadgen", "soak",
                            "tools"}) {
        for (const auto& e : fs::recursive_directory_iterator(root / top)) {
            const auto ext = e.path().extension();
            if (!e.is_regular_file() || (ext != ".cpp" && ext != ".hpp" && ext != ".cc")) continue;
            std::ifstream f(e.path());
            std::string text;
            std::smatch m;
            for (int n = 1; std::getline(f, text); ++n)
                if (std::regex_search(text, m, include))
                    out.push_back({fs::relative(e.path(), root).generic_string(), m[1], n});
        }
    }
    return out;
}

}  // namespace

TEST_CASE("the room table has no cycle and names only rooms", "[layering]") {
    for (const auto& [room, deps] : k_allowed) {
        INFO(room);
        for (const auto& d : deps) {
            INFO(d);
            REQUIRE(k_allowed.count(d) == 1);
            CHECK(reachable(d).count(room) == 0);
        }
    }
}

TEST_CASE("every project include points down the room graph", "[layering]") {
    const auto includes = project_includes();
    REQUIRE(includes.size() > 500);  // the walk found the tree
    int checked = 0;
    for (const auto& inc : includes) {
        const std::string from = room_of(inc.file), to = room_of(inc.target);
        if (to.empty()) continue;  // not a project path (e.g. "boost/...")
        INFO(inc.file << ":" << inc.line << " includes " << inc.target);
        REQUIRE(!from.empty());
        CHECK(reachable(from).count(to) == 1);
        ++checked;
    }
    CHECK(checked > 500);
}

TEST_CASE("the layering check sees a back edge", "[layering]") {
    CHECK(reachable("model/cpu").count("device") == 0);
    CHECK(reachable("actors").count("engine") == 0);
    CHECK(reachable("actors/runtime").count("actors") == 0);
    CHECK(reachable("loadgen").count("net") == 0);
    CHECK(reachable("net").count("loadgen") == 0);
    CHECK(room_of("actors/runtime/actor.hpp") == "actors/runtime");
    CHECK(room_of("actors/device_actor.hpp") == "actors");
    CHECK(room_of("model/core/bf16.hpp") == "model/core");
    CHECK(room_of("device/sim/sim_device.hpp") == "device");
}
