// The speculative-decoding run of the standalone runner (speculative.hpp).
#include "device/runner/speculative.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>

#include "device/runner/host_session.hpp"
#include "device/sampling_head.hpp"
#include "model/speculative/accept.hpp"
#include "model/sampling/sampling.hpp"

namespace calserve::device::runner {

namespace {

namespace spec = model::speculative;
constexpr auto k_width = static_cast<std::size_t>(k_verify_drafts_max);

struct request {
    seq_id seq = 0;
    std::vector<model::token_id> tokens;  // prompt, then generated
    std::size_t prompt = 0;
    model::request_rng rng;
    std::unique_ptr<spec::drafter> drafter;
    spec::acceptance acceptance;
    std::int64_t left(const speculative_options& o) const { return o.max_tokens - std::int64_t(tokens.size() - prompt); }
};

std::vector<model::token_id> prompt_of(const speculative_options& o, int i, std::int64_t vocab) {
    const auto seed = o.seed * 7919 + std::uint64_t(i);
    if (o.workload == "random") return make_prompt(std::size_t(o.prompt_tokens), seed, vocab);
    auto span = make_prompt(std::size_t(std::max(4, o.prompt_tokens / 4)), seed, vocab);
    std::vector<model::token_id> p;
    while (p.size() < std::size_t(o.prompt_tokens)) p.insert(p.end(), span.begin(), span.end());
    p.resize(std::size_t(o.prompt_tokens));
    return p;
}

// The decode program with a sampling head of the smallest batch >= rows.
const submodel_desc* program_for(const package_spec& p, std::size_t rows) {
    const submodel_desc* best = nullptr;
    for (const auto& sm : p.submodels)
        if (sm.kind == submodel_kind::decode && sm.has_sampling_head() && sm.batch >= std::int64_t(rows) &&
            (!best || sm.batch < best->batch))
            best = &sm;
    return best;
}

head_row head_of(const speculative_options& o, const request& r) {
    head_row h;
    h.mode = std::uint32_t(head_mode::sample);
    h.temperature = o.temperature;
    h.top_p = 1;
    std::copy(r.rng.state().begin(), r.rng.state().end(), h.rng);
    return h;
}

struct step_rows {
    std::vector<request*> live;
    std::vector<std::vector<model::token_id>> drafts;
};

// Fills and submits one decode (or verify) job of `rows` on the ping slot.
result<job_id> submit_step(device& dev, const submodel_desc& sm, const speculative_options& o, const step_rows& s) {
    const auto b = static_cast<std::size_t>(sm.batch);
    std::vector<seq_id> rows(b, k_padding_row);
    std::vector<std::int32_t> tok(b, 0), pos(b, 0), drafts(b * k_width, 0);
    std::vector<head_row> head(b);
    bool any = false;
    for (std::size_t i = 0; i < s.live.size(); ++i) {
        const auto& r = *s.live[i];
        rows[i] = r.seq;
        tok[i] = r.tokens.back();
        pos[i] = std::int32_t(dev.kv_length(r.seq));
        head[i] = head_of(o, r);
        std::copy(s.drafts[i].begin(), s.drafts[i].end(), drafts.begin() + std::ptrdiff_t(i * k_width));
        any = any || !s.drafts[i].empty();
        const auto run = 1 + std::int64_t(s.drafts[i].size());
        if (auto e = dev.kv_apply(r.seq, pos[i] + run, o.wait_limit); !e) return e.error();
    }
    if (auto e = dev.slice(sm.name, slot::ping, 1); !e) return e.error();
    if (auto e = dev.write_input(sm.name, slot::ping, "token", std::as_bytes(std::span(tok))); !e) return e.error();
    if (auto e = dev.write_input(sm.name, slot::ping, "position", std::as_bytes(std::span(pos))); !e) return e.error();
    if (auto e = dev.write_input(sm.name, slot::ping, k_head_params, std::as_bytes(std::span(head))); !e) return e.error();
    if (any)
        if (auto e = dev.write_input(sm.name, slot::ping, k_head_drafts, std::as_bytes(std::span(drafts))); !e) return e.error();
    for (std::size_t i = 0; i < s.live.size(); ++i) {
        const auto row = std::int64_t(i);
        const auto run = std::uint32_t(1 + s.drafts[i].size());
        if (auto e = dev.write_csr_row(sm.name, slot::ping, k_csr_cur_seq_len, row, run); !e) return e.error();
        if (auto e = dev.write_csr_row(sm.name, slot::ping, k_csr_past_kv_len, row, std::uint32_t(pos[i])); !e) return e.error();
    }
    return dev.infer_rows(sm.name, slot::ping, rows);
}

template <typename T>
result<std::vector<T>> read_out(device& dev, const submodel_desc& sm, std::string_view name) {
    auto o = dev.output(sm.name, slot::ping, name);
    if (!o) return o.error();
    std::vector<T> v(o->size() / sizeof(T));
    std::memcpy(v.data(), o->data(), v.size() * sizeof(T));
    return v;
}

// The job's outcome per row: tokens appended (drafts kept, then the draw), KV trimmed.
void_result take_step(device& dev, const submodel_desc& sm, step_rows& s, generation_stats& st,
                      const speculative_options& o) {
    auto sampled = read_out<std::int32_t>(dev, sm, k_head_sampled);
    auto accepted = read_out<std::int32_t>(dev, sm, k_head_accepted);
    auto states = read_out<std::uint64_t>(dev, sm, k_head_rng);
    if (!sampled || !accepted || !states) return make_error(status::internal, "verify outputs unreadable");
    for (std::size_t i = 0; i < s.live.size(); ++i) {
        auto& r = *s.live[i];
        if ((*sampled)[i] < 0) return make_error(status::logits_nan, "the head drew no token");
        const auto held = dev.kv_length(r.seq) - std::int64_t(1 + s.drafts[i].size());
        const auto kept = std::int64_t((*accepted)[i]);
        const auto run = spec::emitted_tokens(s.drafts[i], kept, (*sampled)[i], r.left(o), {});
        r.tokens.insert(r.tokens.end(), run.begin(), run.end());
        r.rng.restore({(*states)[i * 4], (*states)[i * 4 + 1], (*states)[i * 4 + 2], (*states)[i * 4 + 3]});
        if (!s.drafts[i].empty()) {
            if (auto e = dev.kv_keep(r.seq, spec::kept_positions(held, kept)); !e) return e;
            if (r.drafter) r.drafter->on_kept(std::int64_t(r.tokens.size()));
        }
        spec::observe(o.spec.policy, r.acceptance, std::int64_t(s.drafts[i].size()), kept);
        st.drafted += std::int64_t(s.drafts[i].size());
        st.accepted += kept;
    }
    return {};
}

double position_cost_of(const speculative_options& o) { return o.position_cost >= 0 ? o.position_cost : 0.1; }

// Prefill every request and draw its first token on the host (the sampler's own code).
result<std::vector<request>> start(device& dev, const speculative_options& o, bool drafting, host_session& hs) {
    std::vector<request> reqs(std::size_t(std::max(1, o.sequences)));
    model::sampler sampler;
    model::sampling_params p;
    p.temperature = o.temperature;
    for (std::size_t i = 0; i < reqs.size(); ++i) {
        auto& r = reqs[i];
        r.seq = 1 + i;
        r.tokens = prompt_of(o, int(i), dev.package().vocab_size);
        r.prompt = r.tokens.size();
        r.rng = model::request_rng(o.seed + i);
        if (drafting) r.drafter = spec::make_drafter(o.spec.drafter);
        r.acceptance = spec::initial_acceptance(o.spec.policy);
        if (auto e = dev.kv_allocate(r.seq, std::int64_t(r.prompt) + o.max_tokens + std::int64_t(k_width) + 1); !e)
            return e.error();
        auto out = hs.prefill(r.seq, r.tokens);
        if (!out) return out.error();
        auto first = sampler.sample(std::span<const float>(out->logits).first(std::size_t(dev.package().vocab_size)), p, {}, r.rng);
        if (!first) return first.error();
        r.tokens.push_back(first->token);
    }
    return reqs;
}

}  // namespace

result<generation_stats> generate(device& dev, const speculative_options& o, bool drafting) {
    host_session hs(dev, o.wait_limit);
    const auto wall0 = std::chrono::steady_clock::now();
    auto reqs = start(dev, o, drafting, hs);
    if (!reqs) return reqs.error();
    generation_stats st;
    while (true) {
        step_rows s;
        for (auto& r : *reqs)
            if (r.left(o) > 0) s.live.push_back(&r);
        if (s.live.empty()) break;
        const auto* sm = program_for(dev.package(), s.live.size());
        if (!sm) return make_error(status::unsupported, "no decode program with a sampling head holds " +
                                                            std::to_string(s.live.size()) + " rows");
        for (auto* r : s.live) {
            const spec::step_facts f{std::int64_t(s.live.size()), false, position_cost_of(o), r->left(o)};
            const auto k = drafting && r->drafter ? spec::draft_length(o.spec.policy, r->acceptance, f) : 0;
            s.drafts.push_back(k > 0 ? r->drafter->propose(r->tokens, std::min<std::int64_t>(k, k_verify_drafts_max))
                                     : std::vector<model::token_id>{});
        }
        auto j = submit_step(dev, *sm, o, s);
        if (!j) return j.error();
        auto done = dev.wait(*j, o.wait_limit);
        if (!done) return done.error();
        st.device_s += double(done->timing.completed_ns - done->timing.submitted_ns) / 1e9;
        ++st.steps;
        if (auto e = take_step(dev, *sm, s, st, o); !e) return e.error();
    }
    for (auto& r : *reqs) {
        st.tokens.emplace_back(r.tokens.begin() + std::ptrdiff_t(r.prompt), r.tokens.end());
        st.tokens.back().resize(std::size_t(o.max_tokens));
        (void)dev.kv_free(r.seq);
    }
    st.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    return st;
}

runner_report run_speculative(device& dev, const speculative_options& o) {
    runner_report rep;
    auto plain = generate(dev, o, false);
    auto drafted = plain ? generate(dev, o, true) : plain;
    if (!plain || !drafted) {
        rep.json["error"] = (plain ? drafted : plain).error().what();
        return rep;
    }
    const double tokens = double(o.sequences) * double(o.max_tokens);
    auto side = [&](const generation_stats& s) {
        boost::json::object j;
        j["steps"] = s.steps;
        j["drafted"] = s.drafted;
        j["accepted"] = s.accepted;
        j["acceptance_rate"] = s.drafted > 0 ? double(s.accepted) / double(s.drafted) : 0.0;
        j["device_s"] = s.device_s;
        j["wall_s"] = s.wall_s;
        j["device_tok_s"] = s.device_s > 0 ? tokens / s.device_s : 0.0;
        j["wall_tok_s"] = s.wall_s > 0 ? tokens / s.wall_s : 0.0;
        return j;
    };
    rep.pass = plain->tokens == drafted->tokens;
    rep.json["identical_tokens"] = rep.pass;
    rep.json["sequences"] = o.sequences;
    rep.json["max_tokens"] = o.max_tokens;
    rep.json["temperature"] = o.temperature;
    rep.json["workload"] = o.workload;
    rep.json["draft_tokens"] = o.spec.policy.max_drafts;
    boost::json::array first;  // the first request's tokens: how repetitive the text is
    for (auto t : plain->tokens.front()) first.push_back(t);
    rep.json["first_request_tokens"] = std::move(first);
    rep.json["plain"] = side(*plain);
    rep.json["drafting"] = side(*drafted);
    rep.json["device_speedup"] = drafted->device_s > 0 ? plain->device_s / drafted->device_s : 0.0;
    rep.json["wall_speedup"] = drafted->wall_s > 0 ? plain->wall_s / drafted->wall_s : 0.0;
    return rep;
}

}  // namespace calserve::device::runner
