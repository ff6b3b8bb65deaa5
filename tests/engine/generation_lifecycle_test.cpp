// The generation lifecycle without an engine or a runtime: every edge of the table
// is taken by generation_record::transition_to, every other move is refused and
// reported, and the state names are the ones `model list` shows.
#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "engine/generation_controller.hpp"
#include "engine/generation_lifecycle.hpp"

using namespace calserve::actors;
using namespace calserve::engine;

namespace {

std::vector<generation_state> all_states() {
    std::vector<generation_state> out;
    for (std::size_t i = 0; i < k_generation_states; ++i) out.push_back(generation_state(i));
    return out;
}

bool in_table(generation_state from, generation_state to) {
    for (const auto& t : k_generation_transitions)
        if (t.from == from && t.to == to) return true;
    return false;
}

// Counts the reports of illegal moves while it lives.
struct illegal_moves {
    std::vector<std::string> seen;
    illegal_moves() {
        set_illegal_transition_handler([this](std::string_view owner, std::string_view from, std::string_view to) {
            seen.push_back(std::string(owner) + ": " + std::string(from) + " -> " + std::string(to));
        });
    }
    ~illegal_moves() { set_illegal_transition_handler(nullptr); }
};

}  // namespace

TEST_CASE("generation lifecycle: every edge of the table is taken", "[generation_lifecycle]") {
    illegal_moves illegal;
    for (const auto& t : k_generation_transitions) {
        CAPTURE(to_string(t.from), to_string(t.to));
        generation_record g(t.from);
        CHECK(g.transition_to(t.to));
        CHECK(g.state() == t.to);
    }
    CHECK(illegal.seen.empty());
}

TEST_CASE("generation lifecycle: every move outside the table is refused, reported and not applied",
          "[generation_lifecycle]") {
    illegal_moves illegal;
    std::size_t refused = 0;
    for (auto from : all_states())
        for (auto to : all_states()) {
            if (in_table(from, to)) continue;
            CAPTURE(to_string(from), to_string(to));
            generation_record g(from);
            CHECK_FALSE(g.transition_to(to));
            CHECK(g.state() == from);
            ++refused;
        }
    CHECK(refused == k_generation_states * k_generation_states - k_generation_transitions.size());
    REQUIRE(illegal.seen.size() == refused);
    // The one a switch must never take: a failed candidate does not serve without a new load.
    generation_record failed(generation_state::failed);
    CHECK_FALSE(failed.transition_to(generation_state::serving));
    CHECK(illegal.seen.back() == "generation: failed -> serving");
}

TEST_CASE("generation lifecycle: a load, a switch away, a rollback that reloads, a failed reload",
          "[generation_lifecycle]") {
    illegal_moves illegal;
    generation_record g;  // a new load starts in `loading`
    for (auto s : {generation_state::warming, generation_state::checking, generation_state::serving,
                   generation_state::draining, generation_state::retired, generation_state::loading,
                   generation_state::failed, generation_state::loading, generation_state::warming,
                   generation_state::checking, generation_state::serving})
        REQUIRE(g.transition_to(s));
    CHECK(illegal.seen.empty());
    // No self-loops: a state is entered once per step.
    for (auto s : all_states()) CHECK_FALSE(legal_transition(s, s));
}

TEST_CASE("generation lifecycle: the state names are model list's, one per state", "[generation_lifecycle]") {
    std::set<std::string_view> names;
    for (auto s : all_states()) names.insert(to_string(s));
    CHECK(names == std::set<std::string_view>{"loading", "warming", "checking", "serving", "draining", "retired", "failed"});
}
