#pragma once
//! Lifecycle state machines: an `enum class` state, a `constexpr` table of legal
//! transitions, and one `transition_to` that checks, logs and counts. An
//! illegal transition is a bug: it is reported (log + global counter + the
//! optional handler, which tests and the soak use) and NOT applied.
//! `to_string(State)` must be findable by ADL for messages.
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace calserve::actors {

template <class State>
struct transition {
    State from;
    State to;
};

template <class State, std::size_t N>
constexpr bool is_legal(const std::array<transition<State>, N>& table, State from, State to) {
    for (const auto& t : table)
        if (t.from == from && t.to == to) return true;
    return false;
}

// Process-wide accounting of illegal transitions (soak invariant: stays 0).
std::uint64_t illegal_transitions_total();
using illegal_transition_handler = std::function<void(std::string_view owner, std::string_view from, std::string_view to)>;
void set_illegal_transition_handler(illegal_transition_handler handler);
void report_illegal_transition(std::string_view owner, std::string_view from, std::string_view to);
void log_transition(std::string_view owner, std::string_view from, std::string_view to);

template <class State, std::size_t N>
class lifecycle {
public:
    constexpr lifecycle(const std::array<transition<State>, N>& table, State initial, std::string owner)
        : table_(&table), state_(initial), owner_(std::move(owner)) {}

    State state() const { return state_; }
    bool is(State s) const { return state_ == s; }
    const std::string& owner() const { return owner_; }

    // Applies `next` if the table allows it; otherwise reports and keeps the state.
    bool transition_to(State next, bool log = false) {
        if (!is_legal(*table_, state_, next)) {
            report_illegal_transition(owner_, to_string(state_), to_string(next));
            return false;
        }
        if (log) log_transition(owner_, to_string(state_), to_string(next));
        state_ = next;
        return true;
    }

private:
    const std::array<transition<State>, N>* table_;
    State state_;
    std::string owner_;
};

}  // namespace calserve::actors
