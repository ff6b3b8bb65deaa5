// Synchronous host driver of the device (see host_session.hpp) and the numeric
// comparison helpers of the runner.
#include "device/runner/host_session.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "device/bf16.hpp"

namespace calserve::device::runner {

host_session::host_session(device& dev, timeout wait_limit) : dev_(dev), wait_limit_(wait_limit) {
    prefill_ = dev_.package().first_of(submodel_kind::prefill);
    decode_ = dev_.package().first_of(submodel_kind::decode);
    if (!decode_) decode_ = prefill_;
    if (!prefill_) prefill_ = decode_;
}

result<job_id> host_session::submit(submodel_kind kind, slot s, seq_id seq, std::span<const model::token_id> tokens) {
    const auto& sm = of(kind);
    const std::int64_t past = dev_.kv_length(seq);
    const auto n = static_cast<std::int64_t>(tokens.size());
    if (auto r = dev_.kv_apply(seq, past + n, wait_limit_); !r) return r.error();
    std::vector<std::int32_t> pos(tokens.size());
    std::iota(pos.begin(), pos.end(), static_cast<std::int32_t>(past));
    if (auto r = dev_.slice(sm.name, s, n); !r) return r.error();
    if (auto r = dev_.write_input(sm.name, s, "token", std::as_bytes(tokens)); !r) return r.error();
    for (const auto& t : sm.inputs) {
        if (t.name != "position") continue;
        if (auto r = dev_.write_input(sm.name, s, "position", std::as_bytes(std::span(pos))); !r) return r.error();
    }
    if (auto r = dev_.write_csr(sm.name, s, k_csr_cur_seq_len, static_cast<std::uint32_t>(n)); !r) return r.error();
    if (auto r = dev_.write_csr(sm.name, s, k_csr_past_kv_len, static_cast<std::uint32_t>(past)); !r) return r.error();
    return dev_.infer(sm.name, s, seq);
}

result<step_output> host_session::collect(job_id job, submodel_kind kind, slot s) {
    auto done = dev_.wait(job, wait_limit_);
    if (!done) return done.error();
    auto out = dev_.output(of(kind).name, s, "logits");
    if (!out) return out.error();
    if (auto r = check_logits_bf16(*out); !r) return r.error();
    step_output o{std::move(*done), {}};
    o.logits.resize(out->size() / sizeof(model::bf16));
    load_bf16(*out, o.logits);
    return o;
}

result<step_output> host_session::prefill(seq_id seq, std::span<const model::token_id> tokens) {
    const auto chunk = static_cast<std::size_t>(prefill_->max_tokens);
    std::size_t at = 0;
    while (true) {
        const std::size_t n = std::min(chunk, tokens.size() - at);
        auto j = submit(submodel_kind::prefill, slot::ping, seq, tokens.subspan(at, n));
        if (!j) return j.error();
        auto o = collect(*j, submodel_kind::prefill, slot::ping);
        at += n;
        if (!o || at == tokens.size()) return o;
    }
}

result<step_output> host_session::decode(seq_id seq, model::token_id token) {
    auto j = submit(submodel_kind::decode, slot::ping, seq, std::span(&token, 1));
    if (!j) return j.error();
    return collect(*j, submodel_kind::decode, slot::ping);
}

model::token_id argmax(std::span<const float> logits) {
    return static_cast<model::token_id>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

namespace {
std::vector<std::size_t> top_k(std::span<const float> v, std::size_t k) {
    std::vector<std::size_t> idx(v.size());
    std::iota(idx.begin(), idx.end(), 0);
    k = std::min(k, idx.size());
    std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(),
                      [&](std::size_t a, std::size_t b) { return v[a] != v[b] ? v[a] > v[b] : a < b; });
    idx.resize(k);
    return idx;
}
}  // namespace

logits_compare compare_logits(std::span<const float> device, std::span<const float> reference) {
    logits_compare c;
    const std::size_t n = std::min(device.size(), reference.size());
    double dot = 0, nd = 0, nr = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const double d = device[i], r = reference[i];
        const double diff = std::fabs(d - r);
        c.max_abs = std::max(c.max_abs, diff);
        c.max_rel = std::max(c.max_rel, diff / std::max(std::fabs(r), 1e-6));
        dot += d * r;
        nd += d * d;
        nr += r * r;
    }
    c.cosine = nd > 0 && nr > 0 ? dot / std::sqrt(nd * nr) : (nd == nr ? 1.0 : 0.0);
    c.top1_match = argmax(device.first(n)) == argmax(reference.first(n));
    const auto td = top_k(device.first(n), 5), tr = top_k(reference.first(n), 5);
    c.top5_overlap = static_cast<int>(std::count_if(td.begin(), td.end(), [&](std::size_t i) {
        return std::find(tr.begin(), tr.end(), i) != tr.end();
    }));
    return c;
}

std::vector<model::token_id> make_prompt(std::size_t n, std::uint64_t seed, std::int64_t limit) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::int64_t> pick(0, std::max<std::int64_t>(1, limit) - 1);
    std::vector<model::token_id> out(n);
    for (auto& t : out) t = static_cast<model::token_id>(pick(rng));
    return out;
}

}  // namespace calserve::device::runner
