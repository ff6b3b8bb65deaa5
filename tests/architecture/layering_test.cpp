// The folder dependency graph (docs/architecture.md, "Rooms"). The rooms are
// CMake's: each calserve_library call of CMakeLists.txt is one, its project DEPS
// its edges (tests/architecture/rooms.hpp). The table below is the architecture
// as reviewed: it must equal CMake's DEPS, edge for edge, so a new dependency is
// a change of this file too. Every project #include of every source file must
// name a room its own room reaches; a top-level folder that is no room (and not
// a known non-code folder) fails; tests/ may include anything. The self-tests
// plant a back edge and an unknown folder in a scratch tree and see them fail.
#include <catch2/catch.hpp>
#include <fstream>

#include "tests/architecture/rooms.hpp"
#include "tests/support/test_paths.hpp"

namespace fs = std::filesystem;
using namespace calserve::test::arch;

namespace {

// Order: config -> io -> model/* -> device -> metrics -> actors/runtime -> actors
// -> engine -> net -> soak -> tools; loadgen beside net, on config only.
const room_table k_allowed = {
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
    {"tools", {"soak", "net", "loadgen"}},
};

room_table cmake_rooms() { return rooms_from_cmake_file(calserve::test::source_dir() / "CMakeLists.txt"); }

std::string describe(const std::vector<violation>& vs) {
    std::string out;
    for (const auto& v : vs) out += v.file + ":" + std::to_string(v.line) + ": " + v.what + "\n";
    return out;
}

void write(const fs::path& file, const std::string& text) {
    fs::create_directories(file.parent_path());
    std::ofstream(file) << text;
}

// A small tree: two rooms, low <- high, and the CMakeLists.txt that builds them.
fs::path planted_tree(const std::string& tag) {
    const auto root = calserve::test::scratch_dir(tag);
    write(root / "CMakeLists.txt",
          "function(calserve_library name)\nendfunction()\n"
          "calserve_library(low DEPS Boost::json)  # the bottom\n"
          "calserve_library(high_core DIR high/core\n    DEPS calserve_low spdlog::spdlog)\n");
    write(root / "low/a.hpp", "#pragma once\n#include <vector>\n");
    write(root / "high/core/b.cpp", "#include \"low/a.hpp\"\n#include \"high/core/b.hpp\"\n");
    write(root / "high/core/b.hpp", "#pragma once\n");
    write(root / "docs/notes.md", "no code\n");
    return root;
}

}  // namespace

TEST_CASE("the reviewed room table is CMake's DEPS, edge for edge", "[layering]") {
    const auto cmake = cmake_rooms();
    REQUIRE(cmake.size() >= 15);  // the parse found the calls
    for (const auto& [room, deps] : k_allowed) {
        INFO("room " << room << " (tests/architecture/layering_test.cpp vs CMakeLists.txt)");
        REQUIRE(cmake.count(room) == 1);
        CHECK(cmake.at(room) == deps);
    }
    for (const auto& [room, deps] : cmake) {
        INFO("CMakeLists.txt builds room " << room << ", which the reviewed table lacks");
        CHECK(k_allowed.count(room) == 1);
    }
}

TEST_CASE("the room table has no cycle", "[layering]") {
    for (const auto& [room, deps] : k_allowed) {
        INFO(room);
        for (const auto& d : deps) {
            INFO(d);
            CHECK(reachable(k_allowed, d).count(room) == 0);
        }
    }
}

TEST_CASE("every folder is a room and every project include points down the room graph", "[layering]") {
    const auto result = scan_tree(calserve::test::source_dir(), cmake_rooms());
    INFO(describe(result.violations));
    CHECK(result.violations.empty());
    CHECK(result.includes_checked > 500);  // the walk found the tree
}

TEST_CASE("the intended order holds", "[layering]") {
    CHECK(reachable(k_allowed, "model/cpu").count("device") == 0);
    CHECK(reachable(k_allowed, "actors").count("engine") == 0);
    CHECK(reachable(k_allowed, "actors/runtime").count("actors") == 0);
    CHECK(reachable(k_allowed, "loadgen").count("net") == 0);
    CHECK(reachable(k_allowed, "net").count("loadgen") == 0);
    CHECK(room_of(k_allowed, "actors/runtime/actor.hpp") == "actors/runtime");
    CHECK(room_of(k_allowed, "actors/device_actor.hpp") == "actors");
    CHECK(room_of(k_allowed, "model/core/bf16.hpp") == "model/core");
    CHECK(room_of(k_allowed, "device/sim/sim_device.hpp") == "device");
}

TEST_CASE("self-test: the CMake reader sees rooms, folders and project DEPS only", "[layering][self-test]") {
    const auto root = planted_tree("layering-cmake");
    const auto table = rooms_from_cmake_file(root / "CMakeLists.txt");
    CHECK(table == room_table{{"low", {}}, {"high/core", {"low"}}});
    const auto clean = scan_tree(root, table);
    INFO(describe(clean.violations));
    CHECK(clean.violations.empty());
    CHECK(clean.includes_checked == 2);
}

TEST_CASE("self-test: a planted back edge fails with its file and line", "[layering][self-test]") {
    const auto root = planted_tree("layering-back-edge");
    write(root / "low/c.cpp", "#include <string>\n\n#include \"high/core/b.hpp\"\n");
    const auto result = scan_tree(root, rooms_from_cmake_file(root / "CMakeLists.txt"));
    REQUIRE(result.violations.size() == 1);
    CHECK(result.violations[0].file == "low/c.cpp");
    CHECK(result.violations[0].line == 3);
    CHECK(result.violations[0].what.find("may not depend on high/core") != std::string::npos);
}

TEST_CASE("self-test: an unknown top-level folder and a file in no room fail", "[layering][self-test]") {
    const auto root = planted_tree("layering-unknown");
    write(root / "newroom/x.cpp", "#include \"low/a.hpp\"\n");
    write(root / "high/loose.cpp", "\n");  // high/ itself is no room: only high/core is
    const auto result = scan_tree(root, rooms_from_cmake_file(root / "CMakeLists.txt"));
    INFO(describe(result.violations));
    REQUIRE(result.violations.size() == 2);
    bool folder = false, loose = false;
    for (const auto& v : result.violations) {
        folder = folder || (v.file == "newroom" && v.what.find("unknown top-level folder") != std::string::npos);
        loose = loose || (v.file == "high/loose.cpp" && v.what.find("in no room") != std::string::npos);
    }
    CHECK(folder);
    CHECK(loose);
}
