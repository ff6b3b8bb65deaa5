// Trace replay, exact or what-if (see soak.hpp and docs/twin.md).
#include <algorithm>
#include <filesystem>
#include <string_view>

#include "soak/soak.hpp"

namespace calserve::soak {
namespace {

// A replay reads the packages from where the daemon read them: the header's (unless
// the replay names another) and every applied load's directory must exist here.
void_result check_package_dirs(const io::trace_file& trace, const replay_options& o) {
    std::vector<std::string> dirs;
    if (!o.package_dir.empty()) dirs.push_back(o.package_dir.string());
    else if (!trace.header.package_dir.empty()) dirs.push_back(trace.header.package_dir);
    if (o.operator_inputs)
        for (const auto& in : trace.inputs)
            if (auto* m = std::get_if<io::trace_model>(&in); m && m->op == "load") dirs.push_back(m->dir);
    for (const auto& d : dirs) {
        std::error_code ec;
        if (!std::filesystem::is_directory(d, ec))
            return make_error(status::not_found, "the package directory " + d +
                                                     " the trace was recorded with does not exist here (a replay loads "
                                                     "the daemon's packages and generation loads from their recorded paths)");
    }
    return {};
}

// Submits and cancels are the workload; the rest is what an operator or the device's
// fault registry did, applied only when asked.
bool workload_input(const io::trace_input& in) {
    return std::holds_alternative<io::trace_submit>(in) || std::holds_alternative<io::trace_cancel>(in);
}

// Compares delivered messages (and fault firings) with the recorded streams.
class stream_check {
public:
    stream_check(const io::trace_file& trace, replay_outcome& out)
        : trace_(trace), out_(out), exact_(trace.header.from_start), started_(exact_),
          want_base_(trace.messages.empty() ? 0 : trace.messages.front().seq) {}

    void start() { started_ = true; }
    bool started() const { return started_; }
    bool diverged() const { return out_.divergence_seq || out_.fire_divergence; }

    void message(const io::trace_message& got) {
        if (diverged() || !started_) return;
        if (!got_base_) got_base_ = got.seq;
        if (next_ >= trace_.messages.size()) {
            out_.divergence_seq = got.seq;
            out_.expected = "(end of recorded messages)";
            out_.got = io::describe(got);
            return;
        }
        const auto& want = trace_.messages[next_++];
        if (same(want, got)) {
            ++out_.compared;
            return;
        }
        out_.divergence_seq = want.seq;
        out_.expected = io::describe(want);
        out_.got = io::describe(got);
    }

    void fire(const io::trace_fire& got) {
        if (diverged() || !started_) return;
        if (next_fire_ < trace_.fires.size() && trace_.fires[next_fire_] == got) {
            ++next_fire_;
            return;
        }
        out_.fire_divergence = next_fire_ + 1;
        out_.expected = next_fire_ < trace_.fires.size() ? io::describe(trace_.fires[next_fire_]) : "(no more fault firings)";
        out_.got = io::describe(got);
    }

    // At the end: recorded records nothing matched are a divergence too.
    void finish() {
        if (!diverged() && next_fire_ < trace_.fires.size()) {
            out_.fire_divergence = next_fire_ + 1;
            out_.expected = io::describe(trace_.fires[next_fire_]);
            out_.got = "(no more fault firings)";
        }
        out_.fires_compared = next_fire_;
        if (!diverged() && next_ < trace_.messages.size()) {
            out_.divergence_seq = trace_.messages[next_].seq;
            out_.expected = io::describe(trace_.messages[next_]);
            out_.got = "(no more messages)";
        }
    }

private:
    // A trace that began with the engine compares everything. One started later
    // (control socket, idle engine) begins at its first input: the fresh engine's
    // start-up messages are not in it, and sequence numbers and actor ids carry an
    // offset, so those compare relative to the first message and by actor name.
    bool same(const io::trace_message& want, const io::trace_message& got) const {
        if (exact_) return want == got;
        return want.seq - want_base_ == got.seq - *got_base_ && want.t_ns == got.t_ns && want.from == got.from &&
               want.to == got.to && want.type == got.type;
    }

    const io::trace_file& trace_;
    replay_outcome& out_;
    bool exact_, started_;
    std::uint64_t want_base_;
    std::optional<std::uint64_t> got_base_;
    std::size_t next_ = 0, next_fire_ = 0;
};

// Keys added after daemon traces were first recorded, with the value the engine ran
// before them. A daemon trace records every runtime/device key, so one without such a
// key ran without the feature, and its replay (and what-if) runs without it too.
constexpr std::pair<std::string_view, std::string_view> k_keys_since[] = {{"runtime.admit_window_us", "0"},
                                                                      {"runtime.prefill_chunk_ms", "0"}};

std::vector<std::string> recorded_overrides(const io::trace_header& h) {
    std::vector<std::string> out;
    if (h.source == "daemon")
        for (const auto& [key, before] : k_keys_since) {
            const auto prefix = std::string(key) + "=";
            const bool recorded = std::any_of(h.overrides.begin(), h.overrides.end(), [&](const std::string& kv) { return kv.starts_with(prefix); });
            if (!recorded) out.push_back(prefix + std::string(before));
        }
    out.insert(out.end(), h.overrides.begin(), h.overrides.end());
    return out;
}

}  // namespace

result<replay_outcome> run_replay(const io::trace_file& trace, const replay_options& o) {
    replay_outcome out;
    stream_check check(trace, out);
    if (auto dirs = check_package_dirs(trace, o); !dirs) return dirs.error();
    sim_setup setup;
    if (!trace.header.packages.empty()) setup.alias = trace.header.packages.front().substr(0, trace.header.packages.front().find('='));
    setup.model_dir = trace.header.model_dir;
    setup.package_dir = o.package_dir.empty() ? std::filesystem::path(trace.header.package_dir) : o.package_dir;
    setup.overrides = recorded_overrides(trace.header);
    setup.overrides.insert(setup.overrides.end(), o.overrides.begin(), o.overrides.end());
    setup.check_reference = false;
    setup.engine_seq = trace.header.from_start ? 0 : trace.header.engine_seq;
    auto sim = simulation::create(setup, [&](const io::trace_message& m) { check.message(m); }, {},
                                  [&](const io::trace_fire& f) { check.fire(f); });
    if (!sim) return sim.error();
    auto stop = [&] { return o.stop_at_divergence && check.diverged(); };
    // A bench workload's times start at its first request: they start when the engine is ready.
    const std::int64_t shift = trace.header.source == "bench" ? (*sim)->now_ns() : 0;
    for (auto in : trace.inputs) {
        if (!o.operator_inputs && !workload_input(in)) continue;
        std::visit([&](auto& r) { r.t_ns += shift; }, in);
        if (!check.started()) {  // reach the first input's time before comparing (the recording began idle)
            std::int64_t t = io::input_time(in);
            if (t > (*sim)->now_ns()) (*sim)->advance_to(t);
            check.start();
        }
        (*sim)->apply(in);
        if (stop()) break;
    }
    if (!stop()) (*sim)->finish();
    check.finish();
    out.report = (*sim)->report();
    out.outcomes = (*sim)->outcomes();
    out.figures = (*sim)->figures();
    return out;
}

}  // namespace calserve::soak
