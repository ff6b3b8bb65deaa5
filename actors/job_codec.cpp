#include "actors/job_codec.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "device/scoring.hpp"
#include "model/core/thread_pool.hpp"
#include "model/sampling/sampling.hpp"
#include "model/speculative/accept.hpp"

namespace calserve::actors {

prefill_span plan_prefill(std::int64_t tokens, std::int64_t device_len, std::int64_t device_kv_len,
                          std::int64_t chunk) {
    prefill_span s;
    s.past = device_len;
    if (s.past > 0 && device_kv_len != s.past) {  // the prefix cache's copy did not happen
        s.past = 0;
        s.copy_lost = true;
    }
    s.count = tokens - s.past;
    if (chunk > 0 && s.count > chunk) {
        s.count = chunk;
        s.partial = true;  // the last token's logits come with a later chunk
    }
    s.fresh = s.past == 0;
    return s;
}

job_input encode_prefill(std::span<const std::int32_t> tokens, std::int64_t past, std::int64_t count) {
    job_input in;
    in.slice_tokens = count;
    in.tokens.assign(tokens.begin() + past, tokens.begin() + past + count);
    in.positions.resize(std::size_t(count));
    for (std::int64_t i = 0; i < count; ++i) in.positions[std::size_t(i)] = std::int32_t(past + i);
    in.cur_seq_len = {std::uint32_t(count)};
    in.past_kv_len = {std::uint32_t(past)};
    return in;
}

std::vector<std::int32_t> encode_score_request(std::span<const std::int32_t> tokens, std::int64_t prompt_len,
                                               std::int32_t top_n, std::int64_t past, std::int64_t count) {
    std::vector<std::int32_t> out(std::size_t(count) * 2, 0);
    for (std::int64_t i = 0; i < count; ++i) {
        const std::int64_t next = past + i + 1;
        const bool prompt = next < prompt_len && next < std::int64_t(tokens.size());
        out[std::size_t(2 * i)] = prompt ? tokens[std::size_t(next)] : -1;
        out[std::size_t(2 * i + 1)] = prompt ? top_n : 0;
    }
    return out;
}

void_result take_scores(device::device& dev, const std::string& sm, device::slot s, sequence_state& seq,
                        std::int64_t past, std::int64_t count) {
    auto logprobs = dev.output(sm, s, device::k_score_logprobs);
    if (!logprobs) return logprobs.error();
    auto ids = dev.output(sm, s, device::k_score_top_ids);
    if (!ids) return ids.error();
    auto tops = dev.output(sm, s, device::k_score_top_logprobs);
    if (!tops) return tops.error();
    constexpr auto k = std::size_t(device::k_score_top_max);
    const auto n = std::size_t(count);
    if (logprobs->size() < n * 4 || ids->size() < n * k * 4 || tops->size() < n * k * 4)
        return make_error(status::internal, "scoring outputs smaller than the prefill's positions");
    seq.prompt_scores.resize(std::size_t(seq.prompt_len));
    for (std::size_t i = 0; i < n; ++i) {
        const std::int64_t next = past + std::int64_t(i) + 1;
        if (next >= seq.prompt_len) break;
        auto& score = seq.prompt_scores[std::size_t(next)];
        std::memcpy(&score.logprob, logprobs->data() + i * 4, 4);
        score.top.clear();
        for (std::size_t t = 0; t < std::size_t(seq.score_top_n) && t < k; ++t) {
            token_logprob e;
            std::memcpy(&e.token, ids->data() + (i * k + t) * 4, 4);
            std::memcpy(&e.logprob, tops->data() + (i * k + t) * 4, 4);
            if (e.token < 0) break;
            score.top.push_back(e);
        }
    }
    return {};
}

job_input encode_decode(const job_context& job, std::int64_t batch, std::span<const std::int64_t> pasts,
                        bool with_head) {
    job_input in;
    in.slice_tokens = 1;
    in.tokens.assign(std::size_t(batch), 0);
    in.positions.assign(std::size_t(batch), 0);
    in.rows.assign(std::size_t(batch), device::k_padding_row);
    for (std::size_t r = 0; r < job.rows.size(); ++r) {
        const auto& seq = *job.rows[r];
        const bool chained = r < job.chain_rows.size() && job.chain_rows[r] >= 0;
        in.tokens[r] = chained ? 0 : seq.tokens[std::size_t(pasts[r])];  // a chained row's comes from its source
        in.positions[r] = std::int32_t(pasts[r]);
        in.rows[r] = seq.seq;
        in.cur_seq_len.push_back(std::uint32_t(1 + job.drafted(r)));
        in.past_kv_len.push_back(std::uint32_t(in.positions[r]));
    }
    if (with_head) {
        in.head.resize(std::size_t(batch));
        head_params_of(job, in.head);
    }
    if (with_head && job.verifies()) {
        constexpr auto width = std::size_t(device::k_verify_drafts_max);
        in.drafts.assign(std::size_t(batch) * width, 0);
        for (std::size_t r = 0; r < job.rows.size() && r < job.drafts.size(); ++r)
            std::copy(job.drafts[r].begin(), job.drafts[r].end(), in.drafts.begin() + std::ptrdiff_t(r * width));
    }
    return in;
}

// What the head returns for a row (docs/device.md "Sampling head"): the draw when the row
// needs only its logits (no penalties, bias, logprobs or token mask); its top K and
// log_z when they determine its token and logprobs exactly (model::top_k_determines:
// logprobs rows, greedy or top-k <= K); else its logits.
device::head_mode head_mode_of(const sequence_state& seq, std::int64_t head_k, std::int64_t vocab) {
    if (seq.constraint) return device::head_mode::logits;
    if (model::head_can_sample(seq.params)) return device::head_mode::sample;
    if (head_k > 0 && model::top_k_determines(seq.params, std::size_t(head_k), std::size_t(vocab)))
        return device::head_mode::top_k;
    return device::head_mode::logits;
}

// A chained row must have been drawn in its source job, and that job must be on the
// device in this generation; otherwise the job goes back unrun (the host reads the
// source's token first and forms the step again).
bool assign_head_modes(job_context& job, bool source_live) {
    const auto& src = job.chain_from;
    job.chain_from_id = source_live ? src->device_job : 0;
    for (std::size_t r = 0; r < job.rows.size(); ++r) {
        job.head[r] = head_mode_of(*job.rows[r], job.head_k, job.vocab);
        const int c = job.chain_rows[r];
        if (c < 0) continue;
        if (!source_live || !job.drawn(r) || !src->drawn(std::size_t(c))) return false;
    }
    return true;
}

// Drafts only ride on rows the program's head draws (docs/device.md "Verify jobs"): a
// profile without a head, a row the head does not draw or a chained row decodes plainly.
void keep_verifiable_drafts(job_context& job, bool head) {
    job.drafts.resize(job.rows.size());
    for (std::size_t r = 0; r < job.rows.size(); ++r) {
        auto& d = job.drafts[r];
        const bool drawn = head && device::head_mode::sample == head_mode_of(*job.rows[r], job.head_k, job.vocab);
        if (!drawn || job.chain_rows[r] >= 0) d.clear();
        if (std::int64_t(d.size()) > device::k_verify_drafts_max) d.resize(std::size_t(device::k_verify_drafts_max));
    }
}

void head_params_of(const job_context& job, std::span<device::head_row> out) {
    for (std::size_t r = 0; r < job.rows.size() && r < out.size(); ++r) {
        const auto& seq = *job.rows[r];
        const bool drawn = job.drawn(r);
        auto& h = out[r];
        h = device::head_row{};
        h.mode = std::uint32_t(job.mode(r));
        h.temperature = seq.params.temperature;
        h.top_p = seq.params.top_p;
        h.top_k = seq.params.top_k;
        h.min_p = seq.params.min_p;
        if (r < job.chain_rows.size() && job.chain_rows[r] >= 0) {
            h.chain_job = job.chain_from_id;  // its token and RNG state come from that job's draw
            h.chain_row = job.chain_rows[r];
        } else if (drawn) {
            const auto& s = seq.rng.state();
            std::copy(s.begin(), s.end(), h.rng);
        }
    }
}

void_result apply_prefill_kv(device::device& dev, device::seq_id sequence, const prefill_span& span,
                             std::int64_t reserve, std::chrono::nanoseconds timeout) {
    if (span.fresh) {
        (void)dev.kv_free(sequence);
        if (auto r = dev.kv_allocate(sequence, reserve); !r) return r;
    }
    return dev.kv_apply(sequence, span.past + span.count, timeout);
}

result<device::job_id> submit_input(device::device& dev, const std::string& sm, device::slot s, const job_input& in,
                                    device::seq_id sequence) {
    if (auto r = dev.slice(sm, s, in.slice_tokens); !r) return r.error();
    if (auto r = dev.write_input(sm, s, "token", std::as_bytes(std::span(in.tokens))); !r) return r.error();
    if (auto r = dev.write_input(sm, s, "position", std::as_bytes(std::span(in.positions))); !r) return r.error();
    if (!in.score_request.empty())
        if (auto r = dev.write_input(sm, s, device::k_score_request, std::as_bytes(std::span(in.score_request))); !r)
            return r.error();
    if (in.rows.empty()) {
        if (auto r = dev.write_csr(sm, s, device::k_csr_cur_seq_len, in.cur_seq_len.front()); !r) return r.error();
        if (auto r = dev.write_csr(sm, s, device::k_csr_past_kv_len, in.past_kv_len.front()); !r) return r.error();
        return dev.infer(sm, s, sequence);
    }
    for (std::size_t r = 0; r < in.cur_seq_len.size(); ++r) {
        const auto row = std::int64_t(r);
        if (auto w = dev.write_csr_row(sm, s, device::k_csr_cur_seq_len, row, in.cur_seq_len[r]); !w) return w.error();
        if (auto w = dev.write_csr_row(sm, s, device::k_csr_past_kv_len, row, in.past_kv_len[r]); !w) return w.error();
    }
    if (!in.head.empty())
        if (auto r = dev.write_input(sm, s, device::k_head_params, std::as_bytes(std::span(in.head))); !r)
            return r.error();
    if (!in.drafts.empty())
        if (auto r = dev.write_input(sm, s, device::k_head_drafts, std::as_bytes(std::span(in.drafts))); !r)
            return r.error();
    return dev.infer_rows(sm, s, in.rows);
}

void_result take_draws(job_context& job, std::span<const std::byte> tokens, std::span<const std::byte> states) {
    const std::size_t rows = job.rows.size();
    if (tokens.size() < rows * 4 || states.size() < rows * 32)
        return make_error(status::internal, "sampling head output smaller than the job's live rows");
    job.drawn_tokens.assign(rows, -1);
    job.drawn_rng.resize(rows);
    for (std::size_t r = 0; r < rows; ++r) {
        if (!job.drawn(r)) continue;
        std::int32_t t = -1;
        std::memcpy(&t, tokens.data() + r * 4, 4);
        if (t < 0 || t >= job.vocab)
            return make_error(status::logits_nan, "sampling head drew no token for row " + std::to_string(r) +
                                                      " (logits not finite)");
        job.drawn_tokens[r] = t;
        std::memcpy(job.drawn_rng[r].data(), states.data() + r * 32, 32);
    }
    return {};
}

void_result take_verify(job_context& job, std::span<const std::byte> accepted) {
    const std::size_t rows = job.rows.size();
    if (accepted.size() < rows * 4) return make_error(status::internal, "verify output smaller than the job's live rows");
    job.accepted.assign(rows, 0);
    job.runs.assign(rows, {});
    for (std::size_t r = 0; r < rows; ++r) {
        const auto d = job.drafted(r);
        if (d == 0 || !job.drawn(r)) continue;
        std::int32_t a = 0;
        std::memcpy(&a, accepted.data() + r * 4, 4);
        if (a < 0 || std::size_t(a) > d)
            return make_error(status::internal, "verify row " + std::to_string(r) + " kept " + std::to_string(a) +
                                                     " of " + std::to_string(d) + " drafts");
        const auto& seq = *job.rows[r];
        job.accepted[r] = a;
        job.runs[r] = model::speculative::emitted_tokens(job.drafts[r], a, job.drawn_tokens[r],
                                                         seq.max_tokens - seq.generated(), seq.stop_ids);
        job.counts[r] = std::int64_t(job.runs[r].size());
    }
    return {};
}

void_result take_top_k(job_context& job, std::span<const std::byte> logits, std::span<const std::byte> ids,
                       std::span<const std::byte> log_z) {
    const std::size_t rows = job.rows.size(), k = std::size_t(job.head_k);
    if (logits.size() < rows * k * 4 || ids.size() < rows * k * 4 || log_z.size() < rows * 8)
        return make_error(status::internal, "sampling head top-k output smaller than the job's live rows");
    job.topk_logits.resize(rows * k);
    job.topk_ids.resize(rows * k);
    job.topk_log_z.resize(rows);
    std::memcpy(job.topk_logits.data(), logits.data(), rows * k * 4);
    std::memcpy(job.topk_ids.data(), ids.data(), rows * k * 4);
    std::memcpy(job.topk_log_z.data(), log_z.data(), rows * 8);
    for (std::size_t r = 0; r < rows; ++r) {
        if (job.mode(r) != device::head_mode::top_k) continue;
        const std::int32_t best = k > 0 ? job.topk_ids[r * k] : -1;
        if (best < 0 || best >= job.vocab || !std::isfinite(job.topk_log_z[r]) || !std::isfinite(job.topk_logits[r * k]))
            return make_error(status::logits_nan, "sampling head returned no top k for row " + std::to_string(r) +
                                                      " (logits not finite)");
    }
    return {};
}

// Rows shared among the pool's threads; the error names the first bad logit, whatever the split.
void_result check_logits_rows(std::span<const std::byte> logits, std::size_t rows, model::thread_pool* pool) {
    if (!pool || rows <= 1) return device::check_logits_bf16(logits);
    const std::size_t row_bytes = logits.size() / rows;
    std::vector<void_result> found(rows);
    pool->parallel_for(std::int64_t(rows), 1, std::int64_t(logits.size()), [&](std::int64_t b, std::int64_t e) {
        for (auto r = std::size_t(b); r < std::size_t(e); ++r) found[r] = device::check_logits_bf16(logits.subspan(r * row_bytes, row_bytes));
    });
    for (std::size_t r = 0; r < rows; ++r)
        if (!found[r])  // rebase the index onto the whole output
            return device::check_logits_bf16(logits.first((r + 1) * row_bytes));
    return {};
}

// Only live rows are checked (padding rows are never sampled), and of those only the
// ones the host samples.
void_result check_host_rows(const job_context& job, model::thread_pool* pool) {
    const std::size_t rows = job.rows.size();
    const std::size_t row_bytes = std::size_t(job.vocab) * 2;
    if (job.logits.size() < row_bytes * rows)
        return make_error(status::internal, "logits output smaller than the job's live rows");
    const auto logits = std::span<const std::byte>(job.logits);
    if (job.rows_in(device::head_mode::logits) == rows)
        return check_logits_rows(logits.first(row_bytes * rows), rows, pool);
    for (std::size_t r = 0; r < rows; ++r) {
        if (job.mode(r) != device::head_mode::logits) continue;
        if (auto nan = device::check_logits_bf16(logits.subspan(r * row_bytes, row_bytes)); !nan)
            return make_error(status::logits_nan, "row " + std::to_string(r) + ": " + nan.error().what());
    }
    return {};
}

std::uint64_t d2h_bytes(const job_context& job) {
    std::uint64_t bytes = 0;
    for (std::size_t i = 0; i < job.rows.size(); ++i) {
        bytes += device::head_row_d2h_bytes(job.mode(i), job.head_k, job.vocab);
        if (i < job.drafts.size() && !job.drafts[i].empty()) bytes += sizeof(std::int32_t);  // a verify row's "accepted"
    }
    // A scoring prefill also returns each position it fed's scores (device/scoring.hpp).
    if (job.scored_from >= 0 && !job.counts.empty())
        bytes += static_cast<std::uint64_t>(job.counts.front()) * device::score_position_d2h_bytes();
    return bytes;
}

// The head's outputs come first (the simulator hands its logits buffer over on the last read).
void_result read_outputs(device::device& dev, const std::string& sm, job_context& job, model::thread_pool* pool) {
    if (job.any_drawn()) {
        auto tokens = dev.output(sm, job.slot, device::k_head_sampled);
        if (!tokens) return tokens.error();
        auto states = dev.output(sm, job.slot, device::k_head_rng);
        if (!states) return states.error();
        if (auto d = take_draws(job, *tokens, *states); !d) return d;
    }
    if (job.verifies()) {
        auto accepted = dev.output(sm, job.slot, device::k_head_accepted);
        if (!accepted) return accepted.error();
        if (auto v = take_verify(job, *accepted); !v) return v;
    }
    if (job.rows_in(device::head_mode::top_k) > 0) {
        auto logits = dev.output(sm, job.slot, device::k_head_topk_logits);
        if (!logits) return logits.error();
        auto ids = dev.output(sm, job.slot, device::k_head_topk_ids);
        if (!ids) return ids.error();
        auto log_z = dev.output(sm, job.slot, device::k_head_lse);
        if (!log_z) return log_z.error();
        if (auto t = take_top_k(job, *logits, *ids, *log_z); !t) return t;
    }
    if (job.rows_in(device::head_mode::logits) == 0) return {};  // the head drew every row
    if (auto r = dev.read_output(sm, job.slot, "logits", job.logits); !r) return r;
    return check_host_rows(job, pool);
}

}  // namespace calserve::actors
