#pragma once
//! The lifecycle of one release generation (docs/generations.md): its states, the
//! legal transitions between them and nothing else. Pure and constexpr, so the
//! table is tested without an engine, and the one place a generation changes state
//! (`generation_record::transition_to`, generation_controller.hpp) checks every move
//! here: an illegal one is reported (actors/runtime/lifecycle.hpp) and not applied.
//!
//!   (a command-line or state-file generation starts serving at once: loading -> serving)
//!
//!            load / rollback of a generation that is not resident
//!                 |
//!   failed ---> loading  --- validate A-F, plan beside what is resident, configure
//!     ^            | ok
//!     |         warming  --- one greedy request through the whole serving path
//!     |            | ok
//!     +-------- checking --- the package's golden corpus, greedy
//!   any step       | ok
//!   fails       serving  <-----------------------------+
//!                  | switch away, unload, --replace    | instant rollback
//!               draining --- requests it admitted finish on it (no new ones)
//!                  | no request holds it (or the drain timed out)
//!               retired  --- unloaded (engine to the graveyard), or resident with --keep
//!                  | rollback: instant when resident, else through loading;
//!                  | a failed --replace brings the drained generation back (serving)
//!
//! Invariants: a generation serves only after the golden check passed (or it was
//! served from the start); a failed generation never served since its last load;
//! only `loading`, `warming` and `checking` belong to a running load, and there is
//! at most one load per host at a time.
#include <array>
#include <cstdint>
#include <string_view>

#include "actors/runtime/lifecycle.hpp"

namespace calserve::engine {

enum class generation_state : std::uint8_t { loading, warming, checking, serving, draining, retired, failed };

inline constexpr std::size_t k_generation_states = 7;

constexpr std::string_view to_string(generation_state s) {
    switch (s) {
        case generation_state::loading: return "loading";
        case generation_state::warming: return "warming";
        case generation_state::checking: return "checking";
        case generation_state::serving: return "serving";
        case generation_state::draining: return "draining";
        case generation_state::retired: return "retired";
        case generation_state::failed: return "failed";
    }
    return "?";
}

// Every legal edge, and why it is taken.
inline constexpr std::array<actors::transition<generation_state>, 13> k_generation_transitions{{
    {generation_state::loading, generation_state::warming},    // validated, placed, configured
    {generation_state::loading, generation_state::serving},    // start-up: served without the load steps
    {generation_state::loading, generation_state::failed},     // refused by a gate, the plan or configure
    {generation_state::warming, generation_state::checking},   // the warm-up request ended well
    {generation_state::warming, generation_state::failed},     // the warm-up failed or timed out
    {generation_state::checking, generation_state::serving},   // the golden corpus matched: the switch
    {generation_state::checking, generation_state::failed},    // a golden divergence, error or timeout
    {generation_state::serving, generation_state::draining},   // switched away, unloaded, or --replace
    {generation_state::draining, generation_state::retired},   // drained (or its drain timed out)
    {generation_state::draining, generation_state::serving},   // instant rollback before it drained
    {generation_state::retired, generation_state::serving},    // instant rollback (--keep), or restored
    {generation_state::retired, generation_state::loading},    // rollback to a generation not resident
    {generation_state::failed, generation_state::loading},     // rollback retried after a failed reload
}};

constexpr bool legal_transition(generation_state from, generation_state to) {
    return actors::is_legal(k_generation_transitions, from, to);
}

using generation_lifecycle = actors::lifecycle<generation_state, k_generation_transitions.size()>;

static_assert(legal_transition(generation_state::checking, generation_state::serving));
static_assert(!legal_transition(generation_state::failed, generation_state::serving));

}  // namespace calserve::engine
