#pragma once
// The room graph as the build states it, and a scanner that checks a source tree
// against a room table. Rooms are CMake's: every `calserve_library(NAME [DIR D]
// DEPS ...)` call of the top-level CMakeLists.txt is one room (its folder D, or
// NAME), its project DEPS (calserve_X) its edges; the `calserve` executable's
// link list is the edges of tools/, the folder it is built from. The scanner
// takes any root, so the tests run it on the real tree and on planted trees.
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace calserve::test::arch {

// Room (a folder relative to the root, e.g. "model/core") -> rooms it may include directly.
using room_table = std::map<std::string, std::set<std::string>>;

// The rooms and their project DEPS read from `cmake_text` (a CMakeLists.txt).
room_table rooms_from_cmake(const std::string& cmake_text);
room_table rooms_from_cmake_file(const std::filesystem::path& cmake_lists);

// `room` and every room reachable from it.
std::set<std::string> reachable(const room_table& table, const std::string& room);
// The longest room that prefixes `path` ("model/core/bf16.hpp" -> "model/core"), or "".
std::string room_of(const room_table& table, const std::string& path);

// Top-level folders that hold no code of their own.
inline const std::set<std::string> k_non_code_folders = {"docs", "tests", "deploy", "Testing"};

struct violation {
    std::string file;    // relative to the root
    int line = 0;        // 0: not about one line
    std::string what;
};

struct scan_result {
    std::vector<violation> violations;
    int includes_checked = 0;
};

// Walks every top-level folder of `root` (hidden folders and build trees aside):
// a folder that is neither the top of a room nor in k_non_code_folders, and a
// source file in no room, are violations; so is a project #include whose room
// the including file's room cannot reach.
scan_result scan_tree(const std::filesystem::path& root, const room_table& table);

}  // namespace calserve::test::arch
