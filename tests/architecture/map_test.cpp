// docs/architecture.md restates the code in its generated regions (the room
// edges, the actors' message graph and tables, every lifecycle's transitions;
// tests/architecture/map.hpp): they must equal what the code says now, so a
// message added to a variant, an edge added to a transition table or a DEPS
// change fails here until `tools/dev map` rewrites the doc.
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "tests/architecture/map.hpp"
#include "tests/support/test_paths.hpp"

namespace fs = std::filesystem;
using namespace calserve::test::arch;

namespace {

fs::path doc_path() { return calserve::test::source_dir() / "docs" / "architecture.md"; }

std::string read_doc() {
    std::ifstream in(doc_path());
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

}  // namespace

TEST_CASE("docs/architecture.md's generated regions equal the code", "[map]") {
    const auto expected = expected_regions(calserve::test::source_dir());
    const auto written = doc_regions(read_doc());
    for (const auto& [name, text] : expected) {
        INFO("region '" << name << "' of docs/architecture.md; `tools/dev map` rewrites it. Expected:\n" << text);
        REQUIRE(written.count(name) == 1);
        CHECK(written.at(name) == text);
    }
    for (const auto& [name, text] : written) {
        INFO("docs/architecture.md has a generated region '" << name << "' that nothing generates");
        CHECK(expected.count(name) == 1);
    }
}

TEST_CASE("the map reader sees every actor, message and lifecycle", "[map]") {
    const auto root = calserve::test::source_dir();
    const auto actors = read_actors(root);
    REQUIRE(actors.size() >= 6);
    for (const auto& a : actors) {
        INFO(a.name);
        CHECK(!a.accepts.empty());
        CHECK(!a.files.empty());
    }
    const auto lifecycles = read_lifecycles(root);
    REQUIRE(lifecycles.size() >= 4);
    for (const auto& t : lifecycles) {
        INFO(t.name);
        CHECK(t.edges.size() >= 2);
    }
    // Every accepted message has a sender (another actor, the engine, or the actor itself).
    const auto graph = read_message_graph(root, actors);
    for (const auto& a : actors)
        for (const auto& msg : a.accepts) {
            bool sent = false;
            for (const auto& [from, tos] : graph)
                if (const auto it = tos.find(a.name); it != tos.end())
                    sent = sent || std::find(it->second.begin(), it->second.end(), msg) != it->second.end();
            INFO(a.name << " accepts " << msg << ", which no source sends");
            CHECK(sent);
        }
}

TEST_CASE("self-test: a region that differs from the code is found and rewritten", "[map][self-test]") {
    const std::string doc = "intro\n<!-- generated: messages (tools/dev map) -->\nold\n<!-- end generated: messages -->\n"
                            "tail\n";
    CHECK(doc_regions(doc) == std::map<std::string, std::string>{{"messages", "old\n"}});
    const auto fixed = rewrite_regions(doc, {{"messages", "| a | b |\n"}});
    CHECK(fixed == "intro\n<!-- generated: messages (tools/dev map) -->\n| a | b |\n<!-- end generated: messages -->\n"
                   "tail\n");
}

TEST_CASE("self-test: a planted message and transition reach the generated text", "[map][self-test]") {
    const auto root = calserve::test::scratch_dir("map-planted");
    const auto write = [&](const std::string& rel, const std::string& text) {
        fs::create_directories((root / rel).parent_path());
        std::ofstream(root / rel) << text;
    };
    write("CMakeLists.txt", "calserve_library(actors FLAT DEPS spdlog::spdlog)\n");
    write("actors/ping_messages.hpp", "struct pi_go {};\nstruct pi_tick {};\n"
                                      "using ping_message = std::variant<pi_go, pi_tick>;  // pi_old in a comment\n");
    write("actors/ping_actor.cpp", "void ping_actor::on(pi_go&) { start_timer(d, [] { tell(pi_tick{}); }); "
                                   "pong_.tell(po_hit{}); }\n");
    write("actors/pong_messages.hpp", "using pong_message = std::variant<po_hit>;\n");
    write("actors/pong_actor.hpp", "enum class side : std::uint8_t { left, right };\n"
                                   "inline constexpr std::array<transition<side>, 2> k_side_table{{\n"
                                   "    {side::left, side::right},   // hit\n    {side::right, side::left},\n}};\n");
    write("engine/host.cpp", "// po_hit is not sent here\nping.tell(pi_go{});\n"
                             "constexpr actors::transition<step> k_step_table[] = {\n    {step::load, step::done},  // ok\n};\n");
    const auto regions = expected_regions(root);
    CHECK(regions.at("message-graph") == "```\nPing   --> Ping  pi_tick\nPing   --> Pong  po_hit\n"
                                         "engine --> Ping  pi_go\n```\n");
    CHECK(regions.at("messages").find("| Ping (`actors/ping_messages.hpp`) | `pi_go`, `pi_tick` | `po_hit` | `pi_tick` |") !=
          std::string::npos);
    CHECK(regions.at("lifecycles") == "`k_side_table` (`actors/pong_actor.hpp`, states `side`):\n\n```\n"
                                      "left  --> right  hit\nright --> left\n```\n\n"
                                      "`k_step_table` (`engine/host.cpp`, states `step`):\n\n```\nload --> done  ok\n```\n");
    CHECK(regions.at("rooms") == "| room | depends on (its `DEPS` in CMakeLists.txt) |\n| --- | --- |\n| actors | (none) |\n");
}

// `tools/dev map`: rewrites the generated regions of docs/architecture.md from the code.
TEST_CASE("write the generated regions of docs/architecture.md", "[.][map-write]") {
    const auto regions = expected_regions(calserve::test::source_dir());
    const std::string doc = read_doc();
    const auto rewritten = rewrite_regions(doc, regions);
    std::ofstream(doc_path()) << rewritten;
    const auto written = doc_regions(rewritten);
    for (const auto& [name, text] : regions) {
        INFO("docs/architecture.md lacks the markers of region '" << name << "': add\n<!-- generated: " << name
                                                                  << " (tools/dev map) -->\n<!-- end generated: "
                                                                  << name << " -->");
        CHECK(written.count(name) == 1);
    }
}
