#include "actors/device_actor.hpp"

#include <cmath>
#include <cstring>
#include <spdlog/spdlog.h>

#include "actors/chip_session_actor.hpp"
#include "actors/kv_manager_actor.hpp"
#include "actors/schedule_policy.hpp"
#include "device/sampling_head.hpp"
#include "metrics/metrics.hpp"
#include "model/core/thread_pool.hpp"
#include "model/sampling/sampling.hpp"

namespace calserve::actors {

namespace {
constexpr std::array<token_id, 8> k_golden_prompt{9707, 11, 1879, 0, 576, 374, 264, 1273};

std::span<const std::byte> as_bytes(const std::vector<std::int32_t>& v) { return std::as_bytes(std::span(v)); }
}  // namespace

device_actor::device_actor(runtime& rt, std::shared_ptr<device::device> dev, device_actor_options options,
                           metrics::calserve_metrics* metrics)
    : actor(rt, "device"), dev_(std::move(dev)), options_(std::move(options)), metrics_(metrics),
      lifecycle_(k_device_health_table, device_health::unconfigured, "device"), jitter_(options_.jitter_seed) {
    if (options_.check_threads > 1) check_pool_ = std::make_unique<model::thread_pool>(options_.check_threads);
    for (const auto& p : options_.decode_profiles) {
        profile_batches_.push_back(p.batch);
        auto d = dev_->submodel(p.submodel);
        profile_heads_.push_back(options_.sampling_head && d && d->has_sampling_head());
        profile_head_k_.push_back(profile_heads_.back() ? d->head_k : 0);
    }
}

device_actor::~device_actor() = default;

// The host's NaN/Inf check of a job's live rows, rows shared among the pool's threads;
// the error names the first bad logit, whatever the split.
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

void device_actor::wire(address<chip_session_actor> session, address<kv_manager_actor> kv) {
    session_ = std::move(session);
    kv_ = std::move(kv);
}

void device_actor::on_message(device_actor_message& msg) {
    std::visit([this](auto& m) { on(m); }, msg);
}

bool device_actor::move_to(device_health next, std::string note) {
    bool log = next != device_health::busy && next != device_health::ready;
    if (lifecycle_.state() == device_health::warmup || lifecycle_.state() == device_health::resetting) log = true;
    const auto from = lifecycle_.state();
    if (!lifecycle_.transition_to(next, log)) return false;
    if (journal_ && log) journal_->record_device(rt().now().count(), to_string(from), to_string(next), std::move(note));
    state_.store(next);
    if (metrics_) metrics_->set_device_state(next);
    return true;
}

const decode_profile* device_actor::profile_for(std::int64_t rows) const {
    const auto i = pick_profile(profile_batches_, rows);
    return i ? &options_.decode_profiles[*i] : nullptr;
}

const std::string& device_actor::submodel_of(const job_ptr& job) const {
    if (job->prefill) return options_.prefill_submodel;
    const auto* p = profile_for(job->profile);
    return p ? p->submodel : options_.decode_profiles.back().submodel;
}

void device_actor::on(da_start&) {
    move_to(device_health::configuring);
    auto state = dev_->status().state;
    bool configured = state == device::device_state::configured || state == device::device_state::ready;
    if (!configured) {  // the engine normally hands over a configured device (parameters loaded at start-up)
        auto r = dev_->configure();
        sync_fault_metrics();
        if (!r) {
            spdlog::error("device configure failed: {}", r.error().what());
            move_to(device_health::dead);
            (void)session_.tell(cs_device_dead{}, id());
            return;
        }
    }
    move_to(device_health::warmup);
    start_golden();
}

void device_actor::start_golden() {
    auto warm = dev_->warmup();
    if (!warm) return golden_failed(warm.error());
    submit_golden(0);
}

void device_actor::golden_failed(const error_info& e) { (void)enqueue(da_golden_done{generation_, e}, id()); }

// The golden prefill; a retryable refusal (submit_busy) is retried with the jobs'
// backoff, as any job's is: a busy queue is not a failed reset.
void device_actor::submit_golden(int attempt) {
    (void)dev_->kv_free(k_golden_sequence);
    std::vector<std::int32_t> tokens(k_golden_prompt.begin(), k_golden_prompt.end());
    std::vector<std::int32_t> positions(tokens.size());
    for (std::size_t i = 0; i < positions.size(); ++i) positions[i] = std::int32_t(i);
    const auto& sm = options_.prefill_submodel;
    auto s = device::slot::ping;
    void_result r = dev_->kv_allocate(k_golden_sequence, std::int64_t(tokens.size()));
    if (r) r = dev_->kv_apply(k_golden_sequence, std::int64_t(tokens.size()), options_.kv_apply_timeout);
    if (r) r = dev_->slice(sm, s, std::int64_t(tokens.size()));
    if (r) r = dev_->write_input(sm, s, "token", as_bytes(tokens));
    if (r) r = dev_->write_input(sm, s, "position", as_bytes(positions));
    if (r) r = dev_->write_csr(sm, s, device::k_csr_cur_seq_len, std::uint32_t(tokens.size()));
    if (r) r = dev_->write_csr(sm, s, device::k_csr_past_kv_len, 0);
    if (!r) return golden_failed(r.error());
    auto job = dev_->infer(sm, s, k_golden_sequence);
    if (!job && fault_class_of(job.error().code) == fault_class::retryable && attempt < options_.retry_limit) {
        sync_fault_metrics();
        const auto gen = generation_;
        start_timer(options_.retry_base * (1 << attempt),
                    [this, gen, attempt] { (void)enqueue(da_golden_retry{gen, attempt + 1}, id()); });
        return;
    }
    if (!job) return golden_failed(job.error());
    auto self = address<device_actor>(shared_from_this());
    auto gen = generation_;
    auto me = id();
    dev_->wait_async(*job, wait_bound(*job), [self, gen, me](result<device::job_result> r) {
        (void)self.tell(da_golden_done{gen, std::move(r)}, me);
    });
}

void device_actor::on(da_golden_retry& m) {
    if (m.generation == generation_ && lifecycle_.is(device_health::warmup)) submit_golden(m.attempt);
}

void device_actor::on(da_golden_done& m) {
    if (m.generation != generation_ || !lifecycle_.is(device_health::warmup)) return;
    void_result check = m.outcome ? void_result{} : void_result{m.outcome.error()};
    if (check) {
        auto out = dev_->output(options_.prefill_submodel, device::slot::ping, "logits");
        if (!out) check = out.error();
        else if (auto nan = device::check_logits_bf16(*out); !nan) check = nan;
        else {
            golden_scratch_.resize(out->size() / 2);
            std::memcpy(golden_scratch_.data(), out->data(), golden_scratch_.size() * 2);
            if (golden_logits_.empty()) golden_logits_ = golden_scratch_;
            else if (golden_scratch_ != golden_logits_)
                check = make_error(status::logits_nan, "golden check: logits differ from the first warm-up");
        }
    }
    (void)dev_->kv_free(k_golden_sequence);
    if (!check) {
        spdlog::warn("device warm-up failed: {}", check.error().what());
        ++failed_resets_;  // a recovery whose golden check fails counts as a failed reset
        fault(check.error());
        return;
    }
    move_to(device_health::ready);
    if (fault_at_.count() > 0) {
        failed_resets_ = 0;
        if (metrics_) metrics_->recovery_seconds.observe(std::chrono::duration<double>(rt().now() - fault_at_).count());
        fault_at_ = {};
    }
    (void)session_.tell(cs_device_up{}, id());
}

void device_actor::on(da_execute& m) {
    if (!lifecycle_.is(device_health::ready) && !lifecycle_.is(device_health::busy)) {
        // Faulted/resetting: the job is lost like any in flight; the ChipSession re-queues it.
        (void)session_.tell(cs_job_done{m.job, make_error(status::not_ready, "device not ready")}, id());
        return;
    }
    auto submitted = fill_and_submit(m.job);
    if (!submitted) {
        fail_job(m.job, submitted.error(), m.attempt);
        return;
    }
    if (m.job->unrun) {  // its chain source was never submitted: nothing ran, the rows go back
        (void)session_.tell(cs_job_done{m.job, {}}, id());
        return;
    }
    if (in_flight_++ == 0) move_to(device_health::busy);
    (void)session_.tell(cs_submitted{m.job}, id());
}

void_result device_actor::fill_and_submit(const job_ptr& job) {
    job->vocab = dev_->package().vocab_size;
    job->counts.assign(job->rows.size(), 0);
    job->failed_row = -1;
    if (job->prefill) return fill_prefill(job);
    return fill_decode(job);
}

// The documented batch-1 prefill: the sequence's tokens not yet on the device (all of them after a reset).
void_result device_actor::fill_prefill(const job_ptr& job) {
    auto& seq = *job->rows.front();
    const auto& sm = options_.prefill_submodel;
    std::int64_t past = seq.device_len;
    if (past > 0 && dev_->kv_length(seq.seq) != past) {
        // Its KV was to come from the prefix cache, and the copy did not happen.
        past = seq.device_len = 0;
        seq.cached_tokens = 0;
    }
    std::int64_t count = std::int64_t(seq.tokens.size()) - past;
    if (options_.prefill_chunk > 0 && count > options_.prefill_chunk) {
        count = options_.prefill_chunk;
        job->partial = true;  // the last token's logits come with a later chunk
    }
    job->counts[0] = count;
    job->profile = 1;
    if (past == 0) {
        (void)dev_->kv_free(seq.seq);  // stale KV from before a reset or preemption, if any
        if (auto r = dev_->kv_allocate(seq.seq, seq.kv_tokens); !r) return r;
    }
    if (auto r = dev_->kv_apply(seq.seq, past + count, options_.kv_apply_timeout); !r) return r;
    std::vector<std::int32_t> tokens(seq.tokens.begin() + past, seq.tokens.begin() + past + count);
    std::vector<std::int32_t> positions(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) positions[std::size_t(i)] = std::int32_t(past + i);
    job->t_fill = rt().now();
    if (auto r = dev_->slice(sm, job->slot, count); !r) return r;
    if (auto r = dev_->write_input(sm, job->slot, "token", as_bytes(tokens)); !r) return r;
    if (auto r = dev_->write_input(sm, job->slot, "position", as_bytes(positions)); !r) return r;
    if (auto r = dev_->write_csr(sm, job->slot, device::k_csr_cur_seq_len, std::uint32_t(count)); !r) return r;
    if (auto r = dev_->write_csr(sm, job->slot, device::k_csr_past_kv_len, std::uint32_t(past)); !r) return r;
    auto id_or = dev_->infer(sm, job->slot, seq.seq);
    if (!id_or) return id_or.error();
    submit_wait(job, *id_or);
    return {};
}

// One decode step for every live row, padded to the smallest profile that holds them.
// A chained row (job->chain_rows) continues from the chain source job still in flight:
// the device holds its past (kv_length counts submitted tokens) and the head copies the
// source row's draw in as its token.
void_result device_actor::fill_decode(const job_ptr& job) {
    const auto live = std::int64_t(job->rows.size());
    const auto index = pick_profile(profile_batches_, live);
    if (!index) return make_error(status::invalid_argument, "no decode profile holds " + std::to_string(live) + " rows");
    const auto& profile = options_.decode_profiles[*index];
    job->profile = profile.batch;
    const auto& sm = profile.submodel;
    const auto batch = std::size_t(profile.batch);
    std::vector<std::int32_t> tokens(batch, 0), positions(batch, 0);
    std::vector<device::seq_id> rows(batch, device::k_padding_row);
    const bool head = profile_heads_[*index];
    if (!head) job->chain_rows.clear();
    job->chain_rows.resize(job->rows.size(), -1);
    for (std::size_t r = 0; r < job->rows.size(); ++r) {
        auto& seq = *job->rows[r];
        const bool chained = job->chain_rows[r] >= 0;
        const std::int64_t past = chained ? dev_->kv_length(seq.seq) : seq.device_len;
        if (auto a = dev_->kv_apply(seq.seq, past + 1, options_.kv_apply_timeout); !a) {
            job->failed_row = int(r);
            return a;
        }
        tokens[r] = chained ? 0 : seq.tokens[std::size_t(past)];
        positions[r] = std::int32_t(past);
        rows[r] = seq.seq;
        job->counts[r] = 1;
    }
    job->head.assign(job->rows.size(), device::head_mode::logits);
    job->head_k = profile_head_k_[*index];
    if (head) {
        if (!fill_head(job)) {
            job->unrun = true;
            job->chain_from = nullptr;
            return {};
        }
    }
    job->chain_from = nullptr;  // the device holds what it needs of it; do not keep its buffers alive
    job->t_fill = rt().now();
    if (auto r = dev_->slice(sm, job->slot, 1); !r) return r;
    if (auto r = dev_->write_input(sm, job->slot, "token", as_bytes(tokens)); !r) return r;
    if (auto r = dev_->write_input(sm, job->slot, "position", as_bytes(positions)); !r) return r;
    for (std::size_t r = 0; r < job->rows.size(); ++r) {
        const auto row = std::int64_t(r);
        if (auto w = dev_->write_csr_row(sm, job->slot, device::k_csr_cur_seq_len, row, 1); !w) return w;
        if (auto w = dev_->write_csr_row(sm, job->slot, device::k_csr_past_kv_len, row, std::uint32_t(positions[r])); !w)
            return w;
    }
    if (head) {
        std::vector<device::head_row> params(batch);
        head_params_of(*job, params);
        if (auto r = dev_->write_input(sm, job->slot, device::k_head_params, std::as_bytes(std::span(params))); !r) return r;
    }
    auto id_or = dev_->infer_rows(sm, job->slot, rows);
    if (!id_or) return id_or.error();
    if (metrics_) {
        metrics_->batch_size.observe(double(live));
        metrics_->batch_padding_rows.inc(double(profile.batch - live));
        if (job->chained()) metrics_->chained_steps.inc();
    }
    submit_wait(job, *id_or);
    return {};
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

// Each row's head mode. A chained row must have been drawn in its source job, and
// that job must be on the device in this generation; otherwise the job goes back unrun
// (the host reads the source's token first and forms the step again).
bool device_actor::fill_head(const job_ptr& job) {
    const auto& src = job->chain_from;
    const bool src_live = src && src->device_job != 0 && src->device_generation == generation_;
    job->chain_from_id = src_live ? src->device_job : 0;
    for (std::size_t r = 0; r < job->rows.size(); ++r) {
        job->head[r] = head_mode_of(*job->rows[r], job->head_k, job->vocab);
        const int c = job->chain_rows[r];
        if (c < 0) continue;
        if (!src_live || !job->drawn(r) || !src->drawn(std::size_t(c))) return false;
    }
    return true;
}

std::chrono::nanoseconds device_actor::wait_bound(device::job_id job) const {
    const auto expected = dev_->expected_completion(job);
    const auto scaled = std::chrono::nanoseconds(std::int64_t(options_.wait_cost_factor * double(expected.count())));
    return std::max(options_.wait_timeout, scaled);
}

void device_actor::submit_wait(const job_ptr& job, device::job_id job_id) {
    job->t_submitted = rt().now();
    job->device_job = job_id;
    job->device_generation = generation_;
    auto self = address<device_actor>(shared_from_this());
    auto gen = generation_;
    auto me = id();
    dev_->wait_async(job_id, wait_bound(job_id), [self, gen, job, me](result<device::job_result> r) {
        (void)self.tell(da_completed{gen, job, std::move(r)}, me);
    });
}

void device_actor::fail_job(const job_ptr& job, const error_info& e, int attempt) {
    auto cls = fault_class_of(e.code);
    if (cls == fault_class::device) {
        // The failing job is lost with the others; fault() tells the ChipSession.
        fault(e, job);
        return;
    }
    bool retry = (cls == fault_class::retryable || cls == fault_class::capacity) && attempt < options_.retry_limit;
    sync_fault_metrics();
    if (retry) {
        auto delay = options_.retry_base * (1 << attempt);
        start_timer(delay, [this, job, attempt] { (void)enqueue(da_execute{job, attempt + 1}, id()); });
        return;
    }
    (void)session_.tell(cs_job_done{job, e}, id());
}

void device_actor::on(da_completed& m) {
    if (m.generation != generation_) return;  // a job abandoned at a fault: never used
    if (--in_flight_ == 0 && lifecycle_.is(device_health::busy)) move_to(device_health::ready);
    if (!m.outcome) {
        fail_job(m.job, m.outcome.error(), options_.retry_limit);
        return;
    }
    finish_job(m.job, *m.outcome);
    sync_fault_metrics();  // ok-status points (slow_infer, short kv_apply_stall) and other layers' points
}

void device_actor::sync_fault_metrics() {
    if (!metrics_ || !options_.faults) return;
    for (std::size_t i = 0; i < device::k_fault_point_count; ++i) {
        auto point = device::all_fault_points[i];
        if (point == device::fault_point::client_stall) continue;  // counted where it fires (net/)
        auto fires = options_.faults->fires(point);
        if (fires == counted_fires_[i]) continue;
        metrics_->faults_total.labels({device::to_string(point)}).inc(double(fires - counted_fires_[i]));
        counted_fires_[i] = fires;
    }
}

void device_actor::finish_job(const job_ptr& job, const device::job_result& r) {
    // D2H of what the job returns: the head's draws, then the logits of the rows the host
    // samples (the simulator hands its buffer over), each checked before it is released.
    const auto& sm = submodel_of(job);
    if (job->any_drawn())
        if (auto d = read_draws(job, sm); !d) return fault(d.error(), job);
    if (job->rows_in(device::head_mode::top_k) > 0)
        if (auto t = read_top_k(job, sm); !t) return fault(t.error(), job);
    if (auto l = read_logits(job, sm); !l) return fault(l.error(), job);
    job->t_done = rt().now();
    job->device_compute_s = double(r.timing.compute_end_ns - r.timing.compute_start_ns) * 1e-9;
    if (metrics_) {
        metrics_->device_busy_seconds.inc(job->device_compute_s);
        std::uint64_t bytes = 0;
        for (std::size_t i = 0; i < job->rows.size(); ++i)
            bytes += device::head_row_d2h_bytes(job->mode(i), job->head_k, job->vocab);
        metrics_->device_drawn_rows.inc(double(job->rows_in(device::head_mode::sample)));
        metrics_->device_topk_rows.inc(double(job->rows_in(device::head_mode::top_k)));
        metrics_->d2h_bytes.inc(double(bytes));
    }
    for (std::size_t i = 0; i < job->rows.size(); ++i) {
        auto& seq = *job->rows[i];
        seq.device_len += job->counts[i];
        (void)kv_.tell(kv_extend{seq.seq, seq.device_len}, id());
    }
    (void)session_.tell(cs_job_done{job, {}}, id());
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

// The sampling head's top K and log_z of every top-k row; a row it could not summarise
// (NaN/Inf logits) is the device fault a bad logit is.
void_result device_actor::read_top_k(const job_ptr& job, const std::string& sm) {
    auto logits = dev_->output(sm, job->slot, device::k_head_topk_logits);
    if (!logits) return logits.error();
    auto ids = dev_->output(sm, job->slot, device::k_head_topk_ids);
    if (!ids) return ids.error();
    auto log_z = dev_->output(sm, job->slot, device::k_head_lse);
    if (!log_z) return log_z.error();
    return take_top_k(*job, *logits, *ids, *log_z);
}

// The sampling head's token and RNG state of every drawn row; a row the head could not
// draw (NaN/Inf logits) is the device fault a bad logit is.
void_result device_actor::read_draws(const job_ptr& job, const std::string& sm) {
    auto tokens = dev_->output(sm, job->slot, device::k_head_sampled);
    if (!tokens) return tokens.error();
    auto states = dev_->output(sm, job->slot, device::k_head_rng);
    if (!states) return states.error();
    return take_draws(*job, *tokens, *states);
}

// The logits of the rows the host samples, NaN/Inf-checked; nothing when the head drew every row.
void_result device_actor::read_logits(const job_ptr& job, const std::string& sm) {
    const std::size_t rows = job->rows.size();
    const std::size_t host_rows = job->rows_in(device::head_mode::logits);
    if (host_rows == 0) return {};
    if (auto r = dev_->read_output(sm, job->slot, "logits", job->logits); !r) return r;
    const std::size_t row_bytes = std::size_t(job->vocab) * 2;
    if (job->logits.size() < row_bytes * rows)
        return make_error(status::internal, "logits output smaller than the job's live rows");
    if (host_rows == rows)  // only live rows are checked: padding rows are never sampled
        return check_logits_rows(std::span<const std::byte>(job->logits).first(row_bytes * rows), rows, check_pool_.get());
    for (std::size_t r = 0; r < rows; ++r) {
        if (job->mode(r) != device::head_mode::logits) continue;
        if (auto nan = device::check_logits_bf16(std::span<const std::byte>(job->logits).subspan(r * row_bytes, row_bytes));
            !nan)
            return make_error(status::logits_nan, "row " + std::to_string(r) + ": " + nan.error().what());
    }
    return {};
}

void device_actor::fault(const error_info& e, const job_ptr& culprit) {
    if (lifecycle_.is(device_health::dead)) return;
    spdlog::warn("device fault: {}", e.what());
    sync_fault_metrics();
    ++generation_;
    in_flight_ = 0;
    if (fault_at_.count() == 0) fault_at_ = rt().now() + std::chrono::nanoseconds(1);
    if (!lifecycle_.is(device_health::faulted)) move_to(device_health::faulted, e.what());
    (void)session_.tell(cs_device_down{culprit}, id());
    move_to(device_health::resetting);
    schedule_reset_step();
}

// The first attempt of a recovery runs at once; later ones back off (header).
void device_actor::schedule_reset_step() {
    auto gen = generation_;
    if (failed_resets_ == 0 || failed_resets_ > options_.reset_limit) {  // first attempt, or declaring dead
        (void)enqueue(da_reset_step{gen}, id());
        return;
    }
    start_timer(reset_backoff(), [this, gen] { (void)enqueue(da_reset_step{gen}, id()); });
}

std::chrono::nanoseconds device_actor::reset_backoff() {
    using std::chrono::nanoseconds;
    if (options_.reset_backoff.count() <= 0 || failed_resets_ <= 0) return nanoseconds{0};
    const int doublings = std::min(failed_resets_ - 1, 20);  // 2^20 x the base is past any sane cap
    auto full = std::min(options_.reset_backoff * (std::int64_t{1} << doublings), options_.reset_backoff_max);
    if (full.count() <= 1) return full;
    std::uniform_int_distribution<std::int64_t> half(full.count() / 2, full.count());
    return nanoseconds{half(jitter_)};
}

void device_actor::on(da_reset& m) {
    if (lifecycle_.is(device_health::dead)) {
        // An operator's reset after the cause was cleared: a fresh recovery.
        spdlog::warn("device: reset requested while dead ({}): trying again", m.reason);
        failed_resets_ = 0;
        ++generation_;
        in_flight_ = 0;
        fault_at_ = rt().now() + std::chrono::nanoseconds(1);
        move_to(device_health::resetting, "operator reset: " + m.reason);
        schedule_reset_step();
        return;
    }
    bool resettable = lifecycle_.is(device_health::ready) || lifecycle_.is(device_health::busy) ||
                      lifecycle_.is(device_health::warmup);
    if (!resettable) return;
    fault(make_error(status::not_ready, "reset requested: " + m.reason));
}

void device_actor::on(da_reset_step& m) {
    if (m.generation != generation_ || !lifecycle_.is(device_health::resetting)) return;
    if (failed_resets_ > options_.reset_limit) {
        spdlog::error("device dead after {} failed resets", failed_resets_);
        move_to(device_health::dead);
        (void)session_.tell(cs_device_dead{}, id());
        return;
    }
    auto r = dev_->reset();
    sync_fault_metrics();
    if (!r) {
        ++failed_resets_;
        spdlog::warn("device reset failed ({} of {}): {}", failed_resets_, options_.reset_limit, r.error().what());
        move_to(device_health::resetting, "reset failed: " + std::string(r.error().what()));
        schedule_reset_step();
        return;
    }
    resets_.fetch_add(1);
    if (metrics_) metrics_->device_resets.inc();
    move_to(device_health::warmup);
    start_golden();
}

void device_actor::on(da_kv_free& m) { (void)dev_->kv_free(m.seq); }

// A prefix cache hit: the new sequence starts as a copy of the cached one's first
// tokens. When the copy fails (a fault, a reset since), its prefill sees the device
// holding less than it expects and feeds the whole prompt (fill_prefill).
void device_actor::on(da_kv_copy& m) {
    (void)dev_->kv_free(m.dst);  // stale KV from before a reset or preemption, if any
    void_result r = dev_->kv_allocate(m.dst, m.reserve);
    if (r) r = dev_->kv_copy(m.src, m.dst, m.tokens);
    if (!r) {
        sync_fault_metrics();
        spdlog::debug("prefix cache copy {} -> {} ({} tokens) failed: {}; prefilling the whole prompt", m.src, m.dst,
                      m.tokens, r.error().what());
    }
}

void device_actor::on(da_kv_keep& m) { (void)dev_->kv_keep(m.seq, m.tokens); }

}  // namespace calserve::actors
