#include "tests/architecture/rooms.hpp"

#include <fstream>
#include <regex>
#include <sstream>

namespace fs = std::filesystem;

namespace calserve::test::arch {
namespace {

std::string without_comments(const std::string& cmake_text) {
    static const std::regex comment(R"(#[^\n]*)");
    return std::regex_replace(cmake_text, comment, "");
}

std::vector<std::string> words(const std::string& s) {
    std::istringstream in(s);
    std::vector<std::string> out;
    for (std::string w; in >> w;) out.push_back(w);
    return out;
}

struct library_call {
    std::string target, dir;
    std::vector<std::string> deps;  // every DEPS word, project or not
};

// `calserve_library(name [FLAT] [DIR dir] [DEPS ...])`, as CMakeLists.txt's function parses it.
library_call parse_library_call(const std::string& args) {
    const auto w = words(args);
    library_call call;
    call.target = "calserve_" + w.at(0);
    call.dir = w.at(0);
    std::string keyword;
    for (std::size_t i = 1; i < w.size(); ++i) {
        if (w[i] == "FLAT" || w[i] == "DIR" || w[i] == "DEPS") {
            keyword = w[i];
        } else if (keyword == "DIR") {
            call.dir = w[i];
        } else if (keyword == "DEPS") {
            call.deps.push_back(w[i]);
        }
    }
    return call;
}

}  // namespace

room_table rooms_from_cmake(const std::string& cmake_text) {
    static const std::regex library(R"((^|\n)[ \t]*calserve_library\(([^)]*)\))");
    static const std::regex executable(R"(target_link_libraries\(calserve\s+PRIVATE([^)]*)\))");
    const std::string text = without_comments(cmake_text);
    std::vector<library_call> calls;
    for (std::sregex_iterator it(text.begin(), text.end(), library), end; it != end; ++it)
        calls.push_back(parse_library_call((*it)[2]));
    std::smatch m;
    if (std::regex_search(text, m, executable)) calls.push_back({"calserve", "tools", words(m[1])});

    std::map<std::string, std::string> dir_of;  // target -> room
    for (const auto& c : calls) dir_of[c.target] = c.dir;
    room_table table;
    for (const auto& c : calls) {
        auto& deps = table[c.dir];
        for (const auto& d : c.deps)
            if (const auto it = dir_of.find(d); it != dir_of.end()) deps.insert(it->second);
    }
    return table;
}

room_table rooms_from_cmake_file(const fs::path& cmake_lists) {
    std::ifstream in(cmake_lists);
    std::stringstream text;
    text << in.rdbuf();
    return rooms_from_cmake(text.str());
}

std::set<std::string> reachable(const room_table& table, const std::string& room) {
    std::set<std::string> seen{room};
    std::vector<std::string> todo{room};
    while (!todo.empty()) {
        const auto r = todo.back();
        todo.pop_back();
        const auto it = table.find(r);
        if (it == table.end()) continue;
        for (const auto& d : it->second)
            if (seen.insert(d).second) todo.push_back(d);
    }
    return seen;
}

std::string room_of(const room_table& table, const std::string& path) {
    std::string best;
    for (const auto& [room, deps] : table)
        if (path.rfind(room + "/", 0) == 0 && room.size() > best.size()) best = room;
    return best;
}

namespace {

bool is_source(const fs::path& p) {
    const auto ext = p.extension();
    return ext == ".cpp" || ext == ".hpp" || ext == ".cc" || ext == ".h";
}

bool is_build_tree(const fs::path& dir) { return fs::exists(dir / "CMakeCache.txt"); }

void scan_file(const fs::path& root, const fs::path& file, const room_table& table, scan_result& out) {
    static const std::regex include(R"re(^\s*#\s*include\s+"([A-Za-z_]+/[^"]+)")re");
    const std::string rel = fs::relative(file, root).generic_string();
    const std::string from = room_of(table, rel);
    if (from.empty()) {
        out.violations.push_back({rel, 0, "a source file in no room (no calserve_library builds its folder)"});
        return;
    }
    const auto allowed = reachable(table, from);
    std::ifstream in(file);
    std::string text;
    std::smatch m;
    for (int n = 1; std::getline(in, text); ++n) {
        if (!std::regex_search(text, m, include)) continue;
        const std::string target = m[1];
        const std::string to = room_of(table, target);
        if (to.empty()) continue;  // not a project path (a system or third-party header)
        ++out.includes_checked;
        if (allowed.count(to) == 0)
            out.violations.push_back({rel, n, "includes " + target + ": room " + from + " may not depend on " + to});
    }
}

}  // namespace

scan_result scan_tree(const fs::path& root, const room_table& table) {
    std::set<std::string> tops;
    for (const auto& [room, deps] : table) tops.insert(room.substr(0, room.find('/')));
    scan_result out;
    for (const auto& top : fs::directory_iterator(root)) {
        const std::string name = top.path().filename().string();
        if (!top.is_directory() || name.starts_with(".") || is_build_tree(top.path()) ||
            k_non_code_folders.count(name))
            continue;
        if (tops.count(name) == 0) {
            out.violations.push_back({name, 0, "an unknown top-level folder: neither a room (CMakeLists.txt) nor "
                                               "listed as holding no code (tests/architecture/rooms.hpp)"});
            continue;
        }
        for (auto it = fs::recursive_directory_iterator(top.path()); it != fs::recursive_directory_iterator(); ++it) {
            if (it->is_directory() && is_build_tree(it->path())) {
                it.disable_recursion_pending();
                continue;
            }
            if (it->is_regular_file() && is_source(it->path())) scan_file(root, it->path(), table, out);
        }
    }
    return out;
}

}  // namespace calserve::test::arch
