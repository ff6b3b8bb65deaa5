// Simulated NPU: infer (validation, fault fate, modelled timeline), the compute
// stage (reference model), in-order completion, Wait and the async completion.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "device/scoring.hpp"
#include "device/sim/sim_device.hpp"
#include "device/bf16.hpp"

namespace calserve::device::sim {

namespace {
std::int64_t ms_to_ns(double ms) { return static_cast<std::int64_t>(std::llround(ms * 1e6)); }

// now + limit without overflowing for "wait forever" limits.
sim_time deadline_after(sim_time now, timeout limit) {
    return limit >= sim_time::max() - now ? sim_time::max() : now + limit;
}

std::size_t input_index(const submodel_desc& sm, std::string_view name) {
    for (std::size_t k = 0; k < sm.inputs.size(); ++k) {
        if (sm.inputs[k].name == name) return k;
    }
    return sm.inputs.size();
}

std::vector<std::int32_t> read_i32(const std::vector<std::byte>& bytes, std::int64_t n) {
    std::vector<std::int32_t> out(static_cast<std::size_t>(n));
    std::memcpy(out.data(), bytes.data(), out.size() * sizeof(std::int32_t));
    return out;
}

// Logits buffers circulate between the jobs of every program (batch profiles of 1..16 rows)
// and the host (read_output swaps them): reused as they are, each would keep the capacity
// of the largest batch it ever held, and all of them would end that large (RSS rising for
// hours under mixed batch sizes). A buffer more than twice the size it is about to hold
// is given back and allocated anew.
template <class T>
void fit_capacity(std::vector<T>& v, std::size_t n) {
    if (v.capacity() > 2 * n + 4096 / sizeof(T)) std::vector<T>().swap(v);
}
}  // namespace

// One live row of a job: its CSRs, KV, room, tokens and positions (row b's
// tokens at [b x tokens, (b+1) x tokens) of the token and position inputs).
void_result sim_device::validate_row(const submodel_desc& sm, const buffer_set& b, std::size_t row, seq_id seq,
                                     bool chained) const {
    const std::string who = sm.batch > 1 ? "row " + std::to_string(row) + ": " : std::string();
    if (!b.csr_cur[row] || !b.csr_past[row])
        return make_error(status::bad_csr, who + "cur_seq_len and past_kv_cur_seq_len must be written");
    const std::int64_t tokens = tokens_of(sm, b);
    // A verify row (sim_verify.cpp) appends 1 + its drafts; any other row the sliced tokens.
    const auto run = static_cast<std::int64_t>(*b.csr_cur[row]);
    const bool verify_row = run > tokens && run <= 1 + k_verify_drafts_max && may_verify(sm, b);
    if (run != tokens && !verify_row)
        return make_error(status::bad_csr, who + "cur_seq_len " + std::to_string(*b.csr_cur[row]) + " != sliced tokens " +
                                               std::to_string(tokens));
    if (!kv_->contains(seq)) return make_error(status::unknown_sequence, who + "KV sequence " + std::to_string(seq));
    const auto it = seq_length_.find(seq);
    const std::int64_t held = it == seq_length_.end() ? 0 : it->second;
    if (static_cast<std::int64_t>(*b.csr_past[row]) != held)
        return make_error(status::bad_csr, who + "past_kv_cur_seq_len " + std::to_string(*b.csr_past[row]) + " != " +
                                               std::to_string(held) + " tokens held by sequence " + std::to_string(seq));
    if (held + run > spec_.context)
        return make_error(status::bad_csr, who + "past + cur = " + std::to_string(held + run) + " exceeds context " +
                                               std::to_string(spec_.context));
    if (held + run > kv_->capacity_of(seq))
        return make_error(status::kv_full, who + "sequence " + std::to_string(seq) + " has KV for " +
                                               std::to_string(kv_->capacity_of(seq)) + " tokens; kv_apply first");
    const auto first = static_cast<std::int64_t>(row) * tokens;
    const auto toks = read_i32(b.inputs[input_index(sm, "token")], first + tokens);
    for (std::int64_t i = first; i < first + tokens && !chained; ++i) {  // a chained row's token comes from its source
        const std::int32_t t = toks[static_cast<std::size_t>(i)];
        if (t < 0 || t >= spec_.vocab_size)
            return make_error(status::invalid_argument, who + "token id " + std::to_string(t) + " outside the vocabulary");
    }
    const std::size_t pi = input_index(sm, "position");
    if (pi < sm.inputs.size()) {
        const auto pos = read_i32(b.inputs[pi], first + tokens);
        for (std::int64_t i = 0; i < tokens; ++i) {
            if (pos[static_cast<std::size_t>(first + i)] != held + i)
                return make_error(status::invalid_argument, who + "position input does not continue the sequence at " +
                                                                std::to_string(held + i));
        }
    }
    return {};
}

void_result sim_device::validate_job(const submodel_desc& sm, const buffer_set& b, std::span<const seq_id> rows,
                                     std::span<const head_row> head) const {
    if (static_cast<std::int64_t>(rows.size()) != sm.batch)
        return make_error(status::invalid_argument, std::to_string(rows.size()) + " rows for " + sm.name + " of batch " +
                                                        std::to_string(sm.batch));
    std::vector<seq_id> live;
    for (seq_id r : rows)
        if (r != k_padding_row) live.push_back(r);
    if (live.empty()) return make_error(status::invalid_argument, "a job needs at least one live row");
    std::sort(live.begin(), live.end());
    if (std::adjacent_find(live.begin(), live.end()) != live.end())
        return make_error(status::invalid_argument, "a sequence appears twice in one job");
    if (sm.batch > 1 && (sm.kind != submodel_kind::decode || tokens_of(sm, b) != 1))
        return make_error(status::unsupported, sm.name + ": batched jobs are one-token decode steps");
    for (std::size_t k = 0; k < sm.inputs.size(); ++k) {
        // Optional: unwritten, every row gets its logits / no row drafts.
        if (sm.inputs[k].name == k_head_params || sm.inputs[k].name == k_head_drafts ||
            sm.inputs[k].name == k_score_request)
            continue;
        if (!b.written[k])
            return make_error(status::missing_tensor, sm.name + "/" + sm.inputs[k].name + " not written for this job");
    }
    if (input_index(sm, "token") == sm.inputs.size())
        return make_error(status::unsupported, sm.name + " has no 'token' input");
    for (std::size_t row = 0; row < rows.size(); ++row) {
        if (rows[row] == k_padding_row) continue;  // padding: nothing of the row is read
        const bool chained = row < head.size() && head[row].chain_job != 0;
        if (auto r = validate_row(sm, b, row, rows[row], chained); !r) return r;
    }
    if (auto r = validate_score_request(sm, b); !r) return r;
    return validate_drafts(sm, b, rows, head);
}

std::vector<model::token_id> sim_device::snapshot_tokens(const submodel_desc& sm, const buffer_set& b) const {
    return read_i32(b.inputs[input_index(sm, "token")], tokens_of(sm, b) * std::max<std::int64_t>(1, sm.batch));
}

std::vector<std::uint64_t> sim_device::live_rows(const job& j) const {
    std::vector<std::uint64_t> out;
    for (seq_id r : j.rows)
        if (r != k_padding_row) out.push_back(r);
    return out;
}

// A one-token decode (any batch) is costed as a batch step over its live rows'
// pasts; a prefill as one sequence's step.
step_breakdown sim_device::modelled_step(const job& j, const submodel_desc& sm) const {
    if (sm.kind == submodel_kind::decode && j.row_tokens == 1) {
        std::vector<std::int64_t> pasts, runs;
        for (std::size_t b = 0; b < j.rows.size(); ++b) {
            if (j.rows[b] == k_padding_row) continue;
            pasts.push_back(j.pasts[b]);
            if (!j.runs.empty()) runs.push_back(j.runs[b]);
        }
        if (!runs.empty()) return latency_->verify_batch_step(pasts, runs, std::max<std::int64_t>(1, sm.batch));
        return latency_->decode_batch_step(pasts, std::max<std::int64_t>(1, sm.batch));
    }
    return latency_->step(sm.kind, j.row_tokens, j.past);
}

void sim_device::decide_fate(job& j, const submodel_desc& sm, double& extra_compute_ms, double& extra_done_ms) {
    const auto live = live_rows(j);
    const fault_site site{sm.chip_mask, sm.name, j.sequence, {}, live};
    auto& f = *options_.faults;
    struct fatal {
        fault_point point;
        job_fate fate;
    };
    for (const fatal& x : {fatal{fault_point::wait_timeout, job_fate::hang},
                           fatal{fault_point::device_lost, job_fate::device_lost},
                           fatal{fault_point::ccu_exception, job_fate::ccu_exception},
                           fatal{fault_point::d2h_error, job_fate::d2h_error}}) {
        if (auto fire = f.check(x.point, site)) {
            j.fate = x.fate;
            extra_done_ms = fire->delay_ms;
            break;
        }
    }
    if (f.check(fault_point::logits_nan, site)) j.poison_logits = true;
    if (auto fire = f.check(fault_point::slow_infer, site)) {
        const double step = modelled_step(j, sm).total_ms;
        extra_compute_ms = fire->delay_ms > 0 ? fire->delay_ms
                                              : (options_.slow_infer_default_ms > 0 ? options_.slow_infer_default_ms
                                                                                    : 4.0 * step);
    }
}

void sim_device::schedule_timing(job& j, const submodel_desc& sm, std::uint64_t h2d_bytes, double extra_compute_ms,
                                 double extra_done_ms) {
    const std::int64_t now = options_.scheduler->now().count();
    const std::uint64_t out_bytes = output_bytes(j, sm);
    auto step = modelled_step(j, sm);
    if (!step.overridden && !j.head.empty()) {  // the head's passes over its rows' logits
        std::int64_t drawn = 0;  // rows the head reads; a verify row: each of its positions
        for (std::size_t b = 0; b < j.head.size(); ++b)
            if (j.rows[b] != k_padding_row && head_mode(j.head[b].mode) != head_mode::logits)
                drawn += j.runs.empty() ? 1 : j.runs[b];
        step.total_ms += latency_->head_ms(drawn);
    }
    if (!step.overridden && !j.score_request.empty()) step.total_ms += latency_->score_ms(j.row_tokens);
    const std::int64_t compute_ns = ms_to_ns(step.total_ms + extra_compute_ms);
    auto& t = j.timing;
    t.submitted_ns = now;
    t.h2d_end_ns = std::max(now, h2d_free_ns_) + ms_to_ns(latency_->h2d_ms(h2d_bytes));
    h2d_free_ns_ = t.h2d_end_ns;
    t.compute_start_ns = std::max(t.h2d_end_ns, compute_free_ns_);
    t.compute_end_ns = t.compute_start_ns + compute_ns;
    compute_free_ns_ = t.compute_end_ns;
    compute_busy_ns_ += compute_ns;
    t.completed_ns = std::max(t.compute_end_ns, d2h_free_ns_) + ms_to_ns(latency_->d2h_ms(out_bytes));
    d2h_free_ns_ = t.completed_ns;
    j.expected_done_ns = t.completed_ns - ms_to_ns(extra_compute_ms);
    t.completed_ns += ms_to_ns(extra_done_ms);
    j.kind = sm.kind == submodel_kind::decode && j.row_tokens == 1 ? job_kind::decode : job_kind::prefill;
    std::vector<std::int64_t> pasts;
    for (std::size_t b = 0; b < j.rows.size(); ++b)
        if (j.rows[b] != k_padding_row) pasts.push_back(j.pasts[b]);
    j.host_work = host_cost_model::work(j.row_tokens, pasts);
    j.decode_program = sm.kind == submodel_kind::decode;
}

result<job_id> sim_device::infer(std::string_view submodel, slot s, seq_id sequence) {
    return infer_rows(submodel, s, std::span(&sequence, 1));
}

result<job_id> sim_device::infer_rows(std::string_view submodel, slot s, std::span<const seq_id> rows) {
    job_ptr j;
    {
        std::lock_guard lock(mutex_);
        if (auto r = check_usable(true); !r) return r.error();
        auto index = find_index(submodel);
        if (!index) return index.error();
        const auto& sm = spec_.submodels[*index];
        if (slot_job_[index_of(s)])
            return make_error(status::submit_busy, std::string("slot ") + std::string(to_string(s)) + " has a job in flight");
        auto& b = buffers(*index, s);
        auto head = head_rows(sm, b);
        if (auto r = note_misuse(validate_job(sm, b, rows, head), "infer"); !r) {
            forget_score_request(sm, b);  // consumed by a refused job too: the next prefill is plain unless it writes one
            return r.error();
        }
        auto chain = resolve_chain(head, rows);
        if (!chain) return chain.error();
        j = std::make_shared<job>();
        j->rows.assign(rows.begin(), rows.end());
        j->head = std::move(head);
        j->chain_from = std::move(*chain);
        j->head_k = sm.head_k;
        const auto live = live_rows(*j);
        const fault_site site{sm.chip_mask, sm.name, live.front(), {}, live};
        if (options_.faults->check(fault_point::submit_busy, site))
            return make_error(status::submit_busy, "injected submit_busy");
        if (options_.faults->check(fault_point::submit_error, site))
            return make_error(status::submit_error, "injected submit_error");
        j->alive = jobs_alive_;
        jobs_alive_->fetch_add(1);
        j->id = next_job_++;
        j->submodel_index = *index;
        j->slot = s;
        for (seq_id r : rows) j->pasts.push_back(r == k_padding_row ? 0 : seq_length_[r]);
        j->sequence = live.front();
        j->past = seq_length_[j->sequence];
        j->row_tokens = tokens_of(sm, b);
        j->tokens = snapshot_tokens(sm, b);
        take_verify_inputs(*j, sm, b);
        take_score_inputs(*j, sm, b);
        j->epoch = epoch_;
        double extra_compute_ms = 0, extra_done_ms = 0;
        decide_fate(*j, sm, extra_compute_ms, extra_done_ms);
        schedule_timing(*j, sm, b.written_bytes, extra_compute_ms, extra_done_ms);
        for (std::size_t row = 0; row < rows.size(); ++row)
            if (rows[row] != k_padding_row) seq_length_[rows[row]] += j->runs.empty() ? j->row_tokens : j->runs[row];
        // The next job on this slot must write every input and CSR again.
        std::fill(b.written.begin(), b.written.end(), false);
        b.written_bytes = 0;
        std::fill(b.csr_cur.begin(), b.csr_cur.end(), std::nullopt);
        std::fill(b.csr_past.begin(), b.csr_past.end(), std::nullopt);
        b.output_valid = false;
        slot_job_[index_of(s)] = j->id;
        remember_head_job(j);
        in_flight_.push_back(j);
        jobs_.emplace(j->id, j);
        ++jobs_submitted_;
        if (j->fate != job_fate::hang) {
            std::weak_ptr<sim_device> weak = weak_from_this();
            options_.scheduler->call_at(sim_time(j->timing.completed_ns), [weak, id = j->id] {
                if (auto self = weak.lock()) self->on_timer(id);
            });
        }
    }
    if (j->fate == job_fate::ok || j->fate == job_fate::hang) {
        post_model_task([this, j] { run_model(j); });
    } else {
        pending_calls calls;
        {
            std::lock_guard lock(mutex_);
            on_compute_done(j, calls);  // a failing job computes nothing
        }
        run_calls(calls);
    }
    return j->id;
}

void sim_device::post_model_task(std::function<void()> task) {
    if (worker_) {
        worker_->post(std::move(task));
    } else {
        task();  // virtual time: compute inline, completion still waits for the modelled instant
    }
}

// The reference model's numbers for every live row: one decode_batch pass for a
// batched decode step (row b's logits at [b x vocab, (b+1) x vocab)); padding
// rows stay zero, they are costed but never computed or sampled.
// `logits` may hold a previous job's numbers: every live row is overwritten by the
// model, padding rows are zeroed here.
void_result sim_device::compute_rows(job& j, std::vector<float>& logits) {
    const auto vocab = static_cast<std::size_t>(model_->shape().vocab_size);
    fit_capacity(logits, vocab * j.rows.size());
    logits.resize(vocab * j.rows.size());
    if (spec_.submodels[j.submodel_index].kind != submodel_kind::decode || j.row_tokens != 1) {
        if (!j.score_request.empty()) return compute_scored(j, logits);
        return model_->prefill(j.sequence, j.tokens, logits);  // batch 1 (validated)
    }
    if (!j.runs.empty()) return compute_verify(j, logits);
    std::vector<model::seq_id> seqs;
    std::vector<model::token_id> toks;
    std::vector<std::size_t> where;
    for (std::size_t b = 0; b < j.rows.size(); ++b) {
        if (j.rows[b] == k_padding_row) continue;
        seqs.push_back(j.rows[b]);
        toks.push_back(j.tokens[b]);
        where.push_back(b);
    }
    const auto zero_row = [&](std::size_t b) {
        std::fill_n(logits.begin() + static_cast<std::ptrdiff_t>(b * vocab), vocab, 0.0f);
    };
    if (where.empty()) {  // refused at submit; nothing to compute
        for (std::size_t b = 0; b < j.rows.size(); ++b) zero_row(b);
        return {};
    }
    if (where.back() + 1 == where.size()) {  // live rows first (the DeviceActor's layout): computed in place
        for (std::size_t b = where.size(); b < j.rows.size(); ++b) zero_row(b);
        if (seqs.size() == 1) return model_->decode(seqs[0], toks[0], std::span(logits.data(), vocab));
        return model_->decode_batch(seqs, toks, std::span(logits.data(), seqs.size() * vocab));
    }
    std::vector<float> packed(seqs.size() * vocab);  // padding between live rows: compute packed, then place
    if (auto r = model_->decode_batch(seqs, toks, packed); !r) return r;
    for (std::size_t b = 0; b < j.rows.size(); ++b) zero_row(b);
    for (std::size_t i = 0; i < seqs.size(); ++i)
        std::copy_n(packed.data() + i * vocab, vocab, logits.data() + where[i] * vocab);
    return {};
}

void sim_device::run_model(const job_ptr& j) {
    std::vector<float> logits;
    std::vector<std::byte> encoded;
    void_result r;
    double host_ns = 0;
    {
        std::lock_guard model_lock(model_mutex_);
        {
            std::lock_guard lock(mutex_);
            if (j->epoch != epoch_) return;  // discarded by a reset
            if (!spare_logits_.empty()) {
                logits = std::move(spare_logits_.back());
                spare_logits_.pop_back();
            }
            if (!spare_encoded_.empty()) {
                encoded = std::move(spare_encoded_.back());
                spare_encoded_.pop_back();
            }
        }
        const auto started = std::chrono::steady_clock::now();
        r = take_chained_tokens(*j);
        if (r) r = compute_rows(*j, logits);
        host_ns = double(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started).count());
    }
    if (r) encode_logits(*j, logits, encoded);
    if (r && !j->head.empty()) {
        std::lock_guard model_lock(model_mutex_);  // the head's sampler scratch; chained jobs read its outputs
        run_head(*j, encoded);
    }
    pending_calls calls;
    {
        std::lock_guard lock(mutex_);
        // Its chained tokens and RNG states are taken: holding the source jobs longer would
        // hold every job of an unbroken chain of steps, each through the next (memory rising
        // for as long as streams keep decoding).
        j->chain_from.clear();
        // Only a real-time compute takes time the runtime waits for (virtual time computes inline).
        if (r && worker_) host_cost_.observe(j->kind, j->host_work, host_ns);
        if (r && worker_ && j->decode_program) host_cost_.observe_step(j->host_work, host_ns);
        if (spare_logits_.size() < k_spare_logits) spare_logits_.push_back(std::move(logits));
        if (j->epoch != epoch_) return;
        if (!r) j->outcome = make_error(r.code() == status::ok ? status::internal : r.code(), "reference model: " + r.error().what());
        j->logits_out = std::move(encoded);
        on_compute_done(j, calls);
    }
    run_calls(calls);
}

void sim_device::on_compute_done(const job_ptr& j, pending_calls& calls) {
    j->compute_done = true;
    complete_head(calls);
}

void sim_device::on_timer(job_id id) {
    pending_calls calls;
    {
        std::lock_guard lock(mutex_);
        auto it = jobs_.find(id);
        if (it == jobs_.end()) return;
        it->second->timer_done = true;
        complete_head(calls);
    }
    run_calls(calls);
}

void sim_device::complete_head(pending_calls& calls) {
    while (!in_flight_.empty() && in_flight_.front()->compute_done && in_flight_.front()->timer_done) {
        job_ptr j = in_flight_.front();
        in_flight_.pop_front();
        finish(*j, calls);
    }
}

// What the device writes into the logits output: an injected NaN fault poisons every
// live row (so a host checking only its rows still sees it), then the output's dtype;
// elements past the computed rows are zero.
void sim_device::encode_logits(const job& j, std::vector<float>& logits, std::vector<std::byte>& out) const {
    const auto& sm = spec_.submodels[j.submodel_index];
    const std::size_t vocab = static_cast<std::size_t>(spec_.vocab_size);
    if (j.poison_logits) {
        for (std::size_t row = 0; row < j.rows.size(); ++row) {
            if (j.rows[row] == k_padding_row || (row + 1) * vocab > logits.size()) continue;
            logits[row * vocab] = std::numeric_limits<float>::quiet_NaN();
            logits[row * vocab + vocab / 2] = std::numeric_limits<float>::infinity();
        }
    }
    out.clear();
    for (const auto& t : sm.outputs) {
        if (t.name != "logits") continue;
        fit_capacity(out, t.bytes);
        out.resize(t.bytes);
        const std::size_t n = std::min<std::size_t>(logits.size(), static_cast<std::size_t>(t.elements()));
        std::size_t written = 0;
        if (t.type == dtype::bf16) {
            store_bf16(std::span<const float>(logits.data(), n), out);
            written = n * 2;
        } else if (t.type == dtype::fp32) {
            std::memcpy(out.data(), logits.data(), n * sizeof(float));
            written = n * sizeof(float);
        }
        std::fill(out.begin() + std::ptrdiff_t(std::min(written, out.size())), out.end(), std::byte{0});
    }
}

void sim_device::write_logits(job& j) {
    const auto& sm = spec_.submodels[j.submodel_index];
    auto& b = buffers(j.submodel_index, j.slot);
    for (std::size_t k = 0; k < sm.outputs.size(); ++k) {
        const auto& t = sm.outputs[k];
        if (t.name == "logits" && j.logits_out.size() == t.bytes) {
            b.outputs[k].swap(j.logits_out);  // encoded by the compute stage
            continue;
        }
        if (b.outputs[k].size() != t.bytes) {
            fit_capacity(b.outputs[k], t.bytes);
            b.outputs[k].assign(t.bytes, std::byte{0});
        }
    }
    if (sm.has_sampling_head()) write_head_outputs(j, sm, b);
    if (!j.score_request.empty()) write_score_outputs(j, sm, b);
    b.output_valid = true;
}

void sim_device::finish(job& j, pending_calls& calls) {
    const auto& sm = spec_.submodels[j.submodel_index];
    slot_job_[index_of(j.slot)].reset();
    j.finished = true;
    ++jobs_completed_;
    switch (j.fate) {
        case job_fate::ok:
        case job_fate::hang: break;
        case job_fate::ccu_exception:
            set_state(device_state::faulted, "injected ccu_exception");
            j.outcome = make_error(status::ccu_exception, "injected ccu_exception on " + sm.name);
            break;
        case job_fate::d2h_error:
            set_state(device_state::faulted, "injected d2h_error");
            j.outcome = make_error(status::d2h_error, "injected d2h_error on " + sm.name);
            break;
        case job_fate::device_lost:
            set_state(device_state::lost, "injected device_lost");
            j.outcome = make_error(status::device_lost, "injected device_lost");
            break;
    }
    if (!j.outcome) {
        write_logits(j);
        const std::int64_t first_run = j.runs.empty() ? j.row_tokens : j.runs[std::size_t(
            std::find(j.rows.begin(), j.rows.end(), j.sequence) - j.rows.begin())];
        job_result r{j.id, sm.name, j.slot, j.sequence, j.row_tokens, j.past + first_run, j.timing, j.rows};
        j.outcome = std::move(r);
    }
    if (spare_encoded_.size() < k_spare_logits && !j.logits_out.empty()) spare_encoded_.push_back(std::move(j.logits_out));
    std::vector<std::byte>().swap(j.logits_out);  // release what is not kept (`= {}` would keep its capacity)
    if (j.callback && !j.delivered) {
        j.delivered = true;
        calls.push_back([cb = std::move(j.callback), o = *j.outcome]() mutable { cb(std::move(o)); });
        jobs_.erase(j.id);
    } else if (j.delivered) {
        jobs_.erase(j.id);  // its waiter already gave up (timeout): nobody will consume it
    }
    cv_.notify_all();
}

result<job_result> sim_device::wait(job_id id, timeout limit) {
    std::unique_lock lock(mutex_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return make_error(status::invalid_argument, "unknown or already consumed job " + std::to_string(id));
    job_ptr j = it->second;
    auto& sched = *options_.scheduler;
    if (sched.is_virtual()) {
        lock.unlock();
        sched.drive_until([&] { std::lock_guard l(mutex_); return j->finished; }, deadline_after(sched.now(), limit));
        lock.lock();
    } else {
        cv_.wait_for(lock, std::min(limit, timeout(std::chrono::hours(24 * 365))), [&] { return j->finished; });
    }
    if (!j->finished)
        return make_error(status::wait_timeout, fmt::format("job {} not done after {:.1f} ms", id,
                                                            std::chrono::duration<double, std::milli>(limit).count()));
    jobs_.erase(id);
    return std::move(*j->outcome);
}

void sim_device::wait_async(job_id id, timeout limit, completion_callback done) {
    std::lock_guard lock(mutex_);
    auto& sched = *options_.scheduler;
    auto it = jobs_.find(id);
    if (it == jobs_.end() || it->second->callback || it->second->delivered) {
        auto err = make_error(status::invalid_argument, "unknown, consumed or already awaited job " + std::to_string(id));
        sched.call_at(sched.now(), [done = std::move(done), err]() mutable { done(err); });
        return;
    }
    job_ptr j = it->second;
    if (j->finished) {
        jobs_.erase(it);
        j->delivered = true;
        sched.call_at(sched.now(), [done = std::move(done), o = *j->outcome]() mutable { done(std::move(o)); });
        return;
    }
    j->callback = std::move(done);
    std::weak_ptr<sim_device> weak = weak_from_this();
    // The timeout holds the job weakly: a delivered job (the usual case, long
    // before the timeout) is freed at once, not when its timer comes due.
    std::weak_ptr<job> weak_job = j;
    sched.call_at(deadline_after(sched.now(), limit), [weak, weak_job, ms = std::chrono::duration<double, std::milli>(limit).count()] {
        auto self = weak.lock();
        auto j = weak_job.lock();
        if (!self || !j) return;
        completion_callback cb;
        {
            std::lock_guard l(self->mutex_);
            if (j->delivered) return;
            j->delivered = true;
            cb = std::move(j->callback);
        }
        cb(make_error(status::wait_timeout, fmt::format("job {} not done after {:.1f} ms", j->id, ms)));
    });
}

timeout sim_device::expected_completion(job_id id) const {
    std::lock_guard lock(mutex_);
    auto it = jobs_.find(id);
    if (it == jobs_.end() || it->second->finished) return timeout{0};
    const std::int64_t now = options_.scheduler->now().count();
    double ns = double(std::max<std::int64_t>(0, it->second->expected_done_ns - now));
    if (worker_) {
        // The host computes jobs one at a time in submission order: those ahead, then this one.
        double host = 0;
        for (const auto& j : in_flight_) {
            if (!j->compute_done) host += host_cost_.estimate_ns(j->kind, j->host_work);
            if (j->id == id) break;
        }
        ns = std::max(ns, host);
    }
    return timeout{std::int64_t(ns)};
}

// The latency model's compute time of the prefill step (the NPU's time, whatever the
// host takes to compute the stand-in numbers). The cpu backend's model prices nothing
// (its constants are zero): there the host is the device, priced by its measured rate
// for the work in real time, and not at all in virtual time (nothing is measured).
timeout sim_device::prefill_cost(std::int64_t tokens, std::int64_t past) const {
    std::lock_guard lock(mutex_);
    if (!latency_ || tokens <= 0) return timeout{0};
    const double ms = latency_->step(submodel_kind::prefill, tokens, past).total_ms;
    if (ms > 0 || !worker_ || !options_.price_by_host_rates) return timeout{ms_to_ns(ms)};
    const std::int64_t pasts[] = {past};
    return timeout{std::llround(host_cost_.estimate_ns(job_kind::prefill, host_cost_model::work(tokens, pasts)))};
}

// A decode step by the latency model (one position: decode_batch_step; more: the verify
// step), or on the cpu backend by the host's fitted step cost, as prefill_cost.
timeout sim_device::decode_cost(std::int64_t rows, std::int64_t positions, std::int64_t past) const {
    std::lock_guard lock(mutex_);
    if (!latency_ || rows <= 0 || positions <= 0) return timeout{0};
    const std::vector<std::int64_t> pasts(std::size_t(rows), past), runs(std::size_t(rows), positions);
    const double ms = positions == 1 ? latency_->decode_batch_step(pasts, rows).total_ms
                                     : latency_->verify_batch_step(pasts, runs, rows).total_ms;
    if (ms > 0 || !worker_ || !options_.price_by_host_rates) return timeout{ms_to_ns(ms)};
    return timeout{std::llround(host_cost_.step_estimate_ns(host_cost_model::work(positions, pasts)))};
}

sim_device::compute_worker::compute_worker() : thread_([this](std::stop_token st) { run(st); }) {}

sim_device::compute_worker::~compute_worker() {
    thread_.request_stop();
    cv_.notify_all();
}

void sim_device::compute_worker::post(std::function<void()> task) {
    {
        std::lock_guard lock(mutex_);
        tasks_.push_back(std::move(task));
    }
    cv_.notify_all();
}

void sim_device::compute_worker::clear_pending() {
    std::lock_guard lock(mutex_);
    tasks_.clear();
}

void sim_device::compute_worker::run(std::stop_token stop) {
    std::unique_lock lock(mutex_);
    while (cv_.wait(lock, stop, [&] { return !tasks_.empty(); })) {
        auto task = std::move(tasks_.front());
        tasks_.pop_front();
        lock.unlock();
        task();
        lock.lock();
    }
}

}  // namespace calserve::device::sim
