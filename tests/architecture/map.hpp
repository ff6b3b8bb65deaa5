#pragma once
// The parts of docs/architecture.md that restate code, generated from the code.
//
// The doc holds them between marker lines:
//   <!-- generated: NAME (tools/dev map) -->
//   ...
//   <!-- end generated: NAME -->
// `expected_regions` computes every region's text from the source tree, the
// architecture test fails when the doc's text differs (printing the expected
// text), and `tools/dev map` rewrites the regions in place. What is read:
//   - actors: every actors/<name>_messages.hpp; the actor's interface is its
//     `using <x>_message = std::variant<...>`, in order; its sources are
//     actors/<name>*.{hpp,cpp}. An actor sends another's message when its sources
//     name it (comments and string literals stripped); it sends itself one when
//     its sources build one (`msg{...}`: from a timer or a callback).
//     engine/ is a sender too (it starts, cancels and resets).
//   - lifecycles: every `std::array<transition<State>, N> k_name{{ {State::a,
//     State::b}, ... }}` (or `transition<State> k_name[] = {...}`) under actors/,
//     engine/ and device/; a trailing `// label` on an edge's line is shown
//     beside it.
//   - rooms: CMake's calserve_library DEPS (tests/architecture/rooms.hpp).
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace calserve::test::arch {

struct actor_info {
    std::string name;                   // "BatchTick", from actors/batch_tick_messages.hpp
    std::string messages_header;        // relative to the root
    std::vector<std::string> accepts;   // the variant's alternatives, in order
    std::vector<std::string> files;     // its sources, relative to the root
};
std::vector<actor_info> read_actors(const std::filesystem::path& root);

struct lifecycle_edge {
    std::string from, to, label;
};
struct lifecycle_table {
    std::string name;   // the table's variable, e.g. k_seq_table
    std::string state;  // the state type, e.g. seq_phase
    std::string file;   // relative to the root
    std::vector<lifecycle_edge> edges;
};
std::vector<lifecycle_table> read_lifecycles(const std::filesystem::path& root);

// Sender -> receiver -> messages (receiver order of its variant). Senders are actor
// names and "engine".
using message_graph = std::map<std::string, std::map<std::string, std::vector<std::string>>>;
message_graph read_message_graph(const std::filesystem::path& root, const std::vector<actor_info>& actors);

// Region name -> its text (without the marker lines, ending in a newline).
std::map<std::string, std::string> expected_regions(const std::filesystem::path& root);
// The doc's regions as written.
std::map<std::string, std::string> doc_regions(const std::string& doc);
// `doc` with every region's text replaced by `regions`' (regions it lacks are left alone).
std::string rewrite_regions(const std::string& doc, const std::map<std::string, std::string>& regions);

}  // namespace calserve::test::arch
