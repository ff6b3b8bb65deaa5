#include "tests/architecture/map.hpp"

#include <algorithm>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "tests/architecture/rooms.hpp"

namespace fs = std::filesystem;

namespace calserve::test::arch {
namespace {

std::string read_text(const fs::path& file) {
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

// The code alone: comments and string/character literals become spaces.
std::string code_only(const std::string& text) {
    static const std::regex noise(R"(//[^\n]*|/\*[\s\S]*?\*/|"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)')");
    return std::regex_replace(text, noise, " ");
}

std::set<std::string> identifiers(const std::string& code) {
    static const std::regex word(R"([A-Za-z_]\w*)");
    std::set<std::string> out;
    for (std::sregex_iterator it(code.begin(), code.end(), word), end; it != end; ++it) out.insert(it->str());
    return out;
}

std::string camel_case(const std::string& snake) {
    std::string out;
    bool up = true;
    for (char c : snake) {
        if (c == '_') {
            up = true;
        } else {
            out += up ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
            up = false;
        }
    }
    return out;
}

std::string trim(const std::string& s) {
    const auto b = s.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return "";
    return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::vector<std::string> variant_of(const std::string& header_text) {
    static const std::regex variant(R"(using\s+\w+_message\s*=\s*std::variant<([^;]*)>\s*;)");
    std::smatch m;
    const std::string code = code_only(header_text);
    std::vector<std::string> out;
    if (!std::regex_search(code, m, variant)) return out;
    std::stringstream list(m[1].str());
    for (std::string item; std::getline(list, item, ',');) out.push_back(trim(item));
    return out;
}

std::vector<fs::path> sources_under(const fs::path& dir) {
    std::vector<fs::path> out;
    if (!fs::exists(dir)) return out;
    for (const auto& e : fs::recursive_directory_iterator(dir))
        if (e.is_regular_file() && (e.path().extension() == ".hpp" || e.path().extension() == ".cpp"))
            out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace

std::vector<actor_info> read_actors(const fs::path& root) {
    static const std::string suffix = "_messages.hpp";
    std::vector<actor_info> out;
    std::vector<fs::path> flat;
    for (const auto& e : fs::directory_iterator(root / "actors"))
        if (e.is_regular_file()) flat.push_back(e.path());
    std::sort(flat.begin(), flat.end());
    for (const auto& p : flat) {
        const std::string file = p.filename().string();
        if (!file.ends_with(suffix)) continue;
        const std::string prefix = file.substr(0, file.size() - suffix.size());
        actor_info a{camel_case(prefix), "actors/" + file, variant_of(read_text(p)), {}};
        for (const auto& q : flat) {
            const std::string f = q.filename().string();
            if (f != file && f.starts_with(prefix) && (q.extension() == ".hpp" || q.extension() == ".cpp"))
                a.files.push_back("actors/" + f);
        }
        out.push_back(std::move(a));
    }
    return out;
}

namespace {

void add_edge(message_graph& g, const std::string& from, const std::string& to, const std::string& msg) {
    auto& list = g[from][to];
    if (std::find(list.begin(), list.end(), msg) == list.end()) list.push_back(msg);
}

// What a sender's sources name: others' messages anywhere; its own where it builds one
// (`msg{...}`: its handlers and helpers name their own messages without sending them).
void add_sender(message_graph& g, const std::string& sender, const std::string& code,
                const std::vector<actor_info>& actors) {
    static const std::regex built(R"(([A-Za-z_]\w*)\s*\{)");
    const auto names = identifiers(code);
    std::set<std::string> constructed;
    for (std::sregex_iterator it(code.begin(), code.end(), built), end; it != end; ++it) constructed.insert((*it)[1]);
    for (const auto& receiver : actors)
        for (const auto& msg : receiver.accepts) {
            const bool own = receiver.name == sender;
            if ((own ? constructed : names).count(msg)) add_edge(g, sender, receiver.name, msg);
        }
}

}  // namespace

message_graph read_message_graph(const fs::path& root, const std::vector<actor_info>& actors) {
    message_graph g;
    for (const auto& a : actors) {
        std::string code;
        for (const auto& f : a.files) code += code_only(read_text(root / f)) + "\n";
        add_sender(g, a.name, code, actors);
    }
    std::string engine;
    for (const auto& f : sources_under(root / "engine")) engine += code_only(read_text(f)) + "\n";
    add_sender(g, "engine", engine, actors);
    return g;
}

namespace {

// The text between the brace at `open` and its match.
std::string braced(const std::string& text, std::size_t open) {
    int depth = 0;
    for (std::size_t i = open; i < text.size(); ++i) {
        if (text[i] == '{') ++depth;
        if (text[i] == '}' && --depth == 0) return text.substr(open + 1, i - open - 1);
    }
    return {};
}

// `std::array<transition<S>, N> k_x{{...}}` (or `= {{...}}`), or `transition<S> k_x[] = {...}`.
void read_tables_in(const fs::path& root, const fs::path& file, std::vector<lifecycle_table>& out) {
    static const std::regex head(
        R"((?:std::array<\s*(?:\w+::)*transition<\s*([\w:]+)\s*>\s*,\s*[\w:.()]+\s*>|(?:\w+::)*transition<\s*([\w:]+)\s*>)\s+(\w+)\s*(?:\[\s*\w*\s*\])?\s*=?\s*\{)");
    static const std::regex edge(R"(\{\s*[\w:]*?(\w+)::(\w+)\s*,\s*[\w:]*?(\w+)::(\w+)\s*\}\s*,?\s*(?://\s*(.*))?)");
    const std::string text = read_text(file);
    for (std::sregex_iterator it(text.begin(), text.end(), head), end; it != end; ++it) {
        std::string type = (*it)[1].matched ? (*it)[1] : (*it)[2];
        if (const auto colon = type.rfind(':'); colon != std::string::npos) type = type.substr(colon + 1);
        lifecycle_table t{(*it)[3], type, fs::relative(file, root).generic_string(), {}};
        std::stringstream lines(braced(text, static_cast<std::size_t>(it->position() + it->length() - 1)));
        std::smatch m;
        for (std::string line; std::getline(lines, line);)
            if (std::regex_search(line, m, edge)) t.edges.push_back({m[2], m[4], trim(m[5])});
        if (!t.edges.empty()) out.push_back(std::move(t));
    }
}

}  // namespace

std::vector<lifecycle_table> read_lifecycles(const fs::path& root) {
    std::vector<lifecycle_table> out;
    for (const char* dir : {"actors", "engine", "device"})
        for (const auto& f : sources_under(root / dir)) read_tables_in(root, f, out);
    return out;
}

namespace {

std::string pad(const std::string& s, std::size_t width) {
    return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

std::string joined(const std::vector<std::string>& items, const std::string& quote = "`") {
    std::string out;
    for (const auto& i : items) out += (out.empty() ? "" : ", ") + quote + i + quote;
    return out.empty() ? "(none)" : out;
}

std::string render_messages(const std::vector<actor_info>& actors, const message_graph& g) {
    std::string out = "| actor | accepts (its `*_messages.hpp` variant, in order) | sends to other actors | "
                      "sends itself (timers, callbacks) |\n| --- | --- | --- | --- |\n";
    for (const auto& a : actors) {
        std::vector<std::string> others, self;
        if (const auto it = g.find(a.name); it != g.end())
            for (const auto& [to, msgs] : it->second)
                for (const auto& m : msgs) (to == a.name ? self : others).push_back(m);
        out += "| " + a.name + " (`" + a.messages_header + "`) | " + joined(a.accepts) + " | " + joined(others) +
               " | " + joined(self) + " |\n";
    }
    return out;
}

std::string render_graph(const message_graph& g) {
    std::size_t wf = 0, wt = 0;
    for (const auto& [from, tos] : g)
        for (const auto& [to, msgs] : tos) wf = std::max(wf, from.size()), wt = std::max(wt, to.size());
    std::string out = "```\n";
    for (const auto& [from, tos] : g)
        for (const auto& [to, msgs] : tos) out += pad(from, wf) + " --> " + pad(to, wt) + "  " + joined(msgs, "") + "\n";
    return out + "```\n";
}

std::string render_lifecycle(const lifecycle_table& t) {
    std::size_t wf = 0, wt = 0;
    for (const auto& e : t.edges) wf = std::max(wf, e.from.size()), wt = std::max(wt, e.to.size());
    std::vector<std::string> order;  // states in order of first appearance as a source
    for (const auto& e : t.edges)
        if (std::find(order.begin(), order.end(), e.from) == order.end()) order.push_back(e.from);
    std::string out = "`" + t.name + "` (`" + t.file + "`, states `" + t.state + "`):\n\n```\n";
    for (const auto& from : order) {
        bool first = true;
        for (const auto& e : t.edges) {
            if (e.from != from) continue;
            std::string line = pad(first ? from : "", wf) + " --> " + pad(e.to, wt) + (e.label.empty() ? "" : "  " + e.label);
            out += trim(line).empty() ? "\n" : line.substr(0, line.find_last_not_of(' ') + 1) + "\n";
            first = false;
        }
    }
    return out + "```\n";
}

// Rooms in dependency order (a room after everything it depends on), then by name.
std::string render_rooms(const room_table& rooms) {
    std::map<std::string, int> depth;
    for (bool changed = true; changed;) {
        changed = false;
        for (const auto& [room, deps] : rooms) {
            int d = 0;
            for (const auto& dep : deps) d = std::max(d, depth[dep] + 1);
            if (depth[room] < d && d <= static_cast<int>(rooms.size())) depth[room] = d, changed = true;
        }
    }
    std::vector<std::pair<int, std::string>> order;
    for (const auto& [room, deps] : rooms) order.emplace_back(depth[room], room);
    std::sort(order.begin(), order.end());
    std::string out = "| room | depends on (its `DEPS` in CMakeLists.txt) |\n| --- | --- |\n";
    for (const auto& [d, room] : order) {
        const auto& deps = rooms.at(room);
        out += "| " + room + " | " + joined({deps.begin(), deps.end()}) + " |\n";
    }
    return out;
}

const std::regex k_begin(R"(^<!-- generated: ([\w-]+) \(tools/dev map\) -->$)");
const std::regex k_end(R"(^<!-- end generated: ([\w-]+) -->$)");

}  // namespace

std::map<std::string, std::string> expected_regions(const fs::path& root) {
    const auto actors = read_actors(root);
    const auto graph = read_message_graph(root, actors);
    std::string lifecycles;
    for (const auto& t : read_lifecycles(root)) {
        if (!lifecycles.empty()) lifecycles += "\n";
        lifecycles += render_lifecycle(t);
    }
    std::map<std::string, std::string> out;
    out["rooms"] = render_rooms(rooms_from_cmake_file(root / "CMakeLists.txt"));
    out["message-graph"] = render_graph(graph);
    out["messages"] = render_messages(actors, graph);
    out["lifecycles"] = std::move(lifecycles);
    return out;
}

std::map<std::string, std::string> doc_regions(const std::string& doc) {
    std::map<std::string, std::string> out;
    std::stringstream lines(doc);
    std::string open, body;
    std::smatch m;
    for (std::string line; std::getline(lines, line);) {
        if (open.empty() && std::regex_match(line, m, k_begin)) {
            open = m[1], body.clear();
        } else if (!open.empty() && std::regex_match(line, m, k_end) && m[1] == open) {
            out[open] = body;
            open.clear();
        } else if (!open.empty()) {
            body += line + "\n";
        }
    }
    return out;
}

std::string rewrite_regions(const std::string& doc, const std::map<std::string, std::string>& regions) {
    std::stringstream lines(doc);
    std::string out, open;
    std::smatch m;
    for (std::string line; std::getline(lines, line);) {
        if (open.empty() && std::regex_match(line, m, k_begin) && regions.count(m[1])) {
            open = m[1];
            out += line + "\n" + regions.at(open);
        } else if (!open.empty() && std::regex_match(line, m, k_end) && m[1] == open) {
            out += line + "\n";
            open.clear();
        } else if (open.empty()) {
            out += line + "\n";
        }
    }
    return out;
}

}  // namespace calserve::test::arch
