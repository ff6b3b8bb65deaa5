#include "actors/device_actor.hpp"

#include <cmath>
#include <cstring>
#include <spdlog/spdlog.h>

#include "actors/chip_session_actor.hpp"
#include "actors/job_codec.hpp"
#include "actors/kv_manager_actor.hpp"
#include "actors/schedule_policy.hpp"
#include "metrics/metrics.hpp"
#include "model/core/thread_pool.hpp"

namespace calserve::actors {

namespace {
constexpr std::array<std::int32_t, 8> k_golden_prompt{9707, 11, 1879, 0, 576, 374, 264, 1273};
}  // namespace

device_actor::device_actor(runtime& rt, std::shared_ptr<device::device> dev, device_actor_options options,
                           metrics::calserve_metrics* metrics)
    : actor(rt, "device"), dev_(std::move(dev)), options_(std::move(options)), metrics_(metrics),
      jitter_(options_.jitter_seed) {
    if (options_.check_threads > 1) check_pool_ = std::make_unique<model::thread_pool>(options_.check_threads);
    for (const auto& p : options_.decode_profiles) {
        profile_batches_.push_back(p.batch);
        auto d = dev_->submodel(p.submodel);
        profile_heads_.push_back(options_.sampling_head && d && d->has_sampling_head());
        profile_head_k_.push_back(profile_heads_.back() ? d->head_k : 0);
    }
}

device_actor::~device_actor() = default;

void device_actor::wire(address<chip_session_actor> session, address<kv_manager_actor> kv) {
    session_ = std::move(session);
    kv_ = std::move(kv);
}

void device_actor::on_message(device_actor_message& msg) {
    std::visit([this](auto& m) { on(m); }, msg);
}

// Checked against the table; an illegal move is reported and not applied (lifecycle.hpp).
bool device_actor::move_to(device_actor_state next, std::string note) {
    const auto from = health_of(state_), to = health_of(next);
    bool log = to != device_health::busy && to != device_health::ready;
    if (from == device_health::warmup || from == device_health::resetting) log = true;
    if (!is_legal(k_device_health_table, from, to)) {
        report_illegal_transition("device", to_string(from), to_string(to));
        return false;
    }
    if (log) log_transition("device", to_string(from), to_string(to));
    if (journal_ && log) journal_->record_device(rt().now().count(), to_string(from), to_string(to), std::move(note));
    state_ = std::move(next);
    published_.store(to);
    if (metrics_) metrics_->set_device_state(to);
    return true;
}

std::optional<recovery> device_actor::recovering() const {
    if (const auto* w = std::get_if<da_state::warmup>(&state_)) return w->recovering;
    if (const auto* f = std::get_if<da_state::faulted>(&state_)) return f->recovering;
    if (const auto* r = std::get_if<da_state::resetting>(&state_)) return r->recovering;
    return std::nullopt;
}

const std::string& device_actor::submodel_of(const job_ptr& job) const {
    if (job->prefill) return options_.prefill_submodel;
    const auto i = pick_profile(profile_batches_, job->profile);
    return i ? options_.decode_profiles[*i].submodel : options_.decode_profiles.back().submodel;
}

void device_actor::on(da_start&) {
    move_to(da_state::configuring{});
    auto state = dev_->status().state;
    bool configured = state == device::device_state::configured || state == device::device_state::ready;
    if (!configured) {  // the engine normally hands over a configured device (parameters loaded at start-up)
        auto r = dev_->configure();
        sync_fault_metrics();
        if (!r) {
            spdlog::error("device configure failed: {}", r.error().what());
            move_to(da_state::dead{});
            (void)session_.tell(cs_device_dead{}, id());
            return;
        }
    }
    move_to(da_state::warmup{});
    start_golden();
}

void device_actor::start_golden() {
    auto warm = dev_->warmup();
    if (!warm) return golden_failed(warm.error());
    submit_golden(0);
}

void device_actor::golden_failed(const error_info& e) { (void)enqueue(da_golden_done{generation_, e}, id()); }

// The golden prefill, encoded as any prefill is; a retryable refusal (submit_busy) is
// retried with the jobs' backoff: a busy queue is not a failed reset.
void device_actor::submit_golden(int attempt) {
    const auto count = std::int64_t(k_golden_prompt.size());
    const auto span = plan_prefill(count, 0, 0, 0);
    if (auto r = apply_prefill_kv(*dev_, k_golden_sequence, span, count, options_.kv_apply_timeout); !r)
        return golden_failed(r.error());
    auto job = submit_input(*dev_, options_.prefill_submodel, device::slot::ping,
                            encode_prefill(k_golden_prompt, span.past, span.count), k_golden_sequence);
    if (!job && retries_golden(fault_class_of(job.error().code), attempt, options_.retry_limit)) {
        sync_fault_metrics();
        const auto gen = generation_;
        start_timer(retry_delay(options_.retry_base, attempt),
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
    if (m.generation == generation_ && in<da_state::warmup>()) submit_golden(m.attempt);
}

// The golden prefill's logits: finite, and those of the first warm-up.
void_result device_actor::golden_check(const result<device::job_result>& outcome) {
    if (!outcome) return outcome.error();
    auto out = dev_->output(options_.prefill_submodel, device::slot::ping, "logits");
    if (!out) return out.error();
    if (auto nan = check_logits_rows(*out, 1, nullptr); !nan) return nan;
    golden_scratch_.resize(out->size() / 2);
    std::memcpy(golden_scratch_.data(), out->data(), golden_scratch_.size() * 2);
    if (golden_logits_.empty()) golden_logits_ = golden_scratch_;
    else if (golden_scratch_ != golden_logits_)
        return make_error(status::logits_nan, "golden check: logits differ from the first warm-up");
    return {};
}

void device_actor::on(da_golden_done& m) {
    if (m.generation != generation_ || !in<da_state::warmup>()) return;
    const auto check = golden_check(m.outcome);
    (void)dev_->kv_free(k_golden_sequence);
    if (!check) {
        spdlog::warn("device warm-up failed: {}", check.error().what());
        fault(check.error(), nullptr, true);  // a recovery whose golden check fails counts as a failed reset
        return;
    }
    const auto rec = recovering();
    move_to(da_state::ready{});
    if (rec && metrics_)
        metrics_->recovery_seconds.observe(std::chrono::duration<double>(rt().now() - rec->since).count());
    (void)session_.tell(cs_device_up{generation_}, id());
}

void device_actor::on(da_execute& m) {
    if (!in<da_state::ready>() && !in<da_state::busy>()) {
        // Faulted/resetting: the job is lost like any in flight; the ChipSession re-queues it.
        (void)session_.tell(cs_job_done{m.job, make_error(status::not_ready, "device not ready")}, id());
        return;
    }
    if (m.job->generation != generation_) {
        // Formed before a reset the BatchTick had not heard of yet, or retried across one:
        // its rows' KV is gone (a decode would name sequences the device does not hold, a
        // prefill would allocate one a newer job holds). Lost like any job at a fault.
        (void)session_.tell(cs_job_done{m.job, make_error(status::not_ready, "job formed before a device reset")}, id());
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
    if (auto* b = std::get_if<da_state::busy>(&state_)) ++b->in_flight;
    else move_to(da_state::busy{});
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
    const auto device_kv = seq.device_len > 0 ? dev_->kv_length(seq.seq) : 0;
    const auto tokens = std::int64_t(seq.tokens.size());
    const auto rest = plan_prefill(tokens, seq.device_len, device_kv, 0);
    const auto chunk = prefill_chunk_limit({options_.prefill_chunk, options_.prefill_chunk_target}, !seq.prefill_alone,
                                           rest.count, [&](std::int64_t t) { return dev_->prefill_cost(t, rest.past); });
    const auto span = plan_prefill(tokens, seq.device_len, device_kv, chunk);
    if (span.copy_lost) seq.device_len = seq.cached_tokens = 0;  // its KV was to come from the prefix cache
    job->partial = job->partial || span.partial;
    job->counts[0] = span.count;
    job->profile = 1;
    if (auto r = apply_prefill_kv(*dev_, seq.seq, span, seq.kv_tokens, options_.kv_apply_timeout); !r) return r;
    job->t_fill = rt().now();
    auto in = encode_prefill(seq.tokens, span.past, span.count);
    job->scored_from = -1;
    if (seq.scoring() && span.past + 1 < seq.prompt_len) {  // positions whose next token is a prompt token
        in.score_request = encode_score_request(seq.tokens, seq.prompt_len, seq.score_top_n, span.past, span.count);
        job->scored_from = span.past;
    }
    auto id_or = submit_input(*dev_, options_.prefill_submodel, job->slot, in, seq.seq);
    if (!id_or) return id_or.error();
    submit_wait(job, *id_or);
    return {};
}

// A chained row (job->chain_rows) continues from the chain source job still in flight:
// the device holds its past (kv_length counts submitted tokens) and the head copies the
// source row's draw in as its token.
void_result device_actor::fill_decode(const job_ptr& job) {
    const auto live = std::int64_t(job->rows.size());
    const auto index = pick_profile(profile_batches_, live);
    if (!index) return make_error(status::invalid_argument, "no decode profile holds " + std::to_string(live) + " rows");
    const auto& profile = options_.decode_profiles[*index];
    job->profile = profile.batch;
    const bool head = profile_heads_[*index];
    if (!head) job->chain_rows.clear();
    job->chain_rows.resize(job->rows.size(), -1);
    job->head_k = profile_head_k_[*index];
    keep_verifiable_drafts(*job, head);
    std::vector<std::int64_t> pasts(job->rows.size());
    for (std::size_t r = 0; r < job->rows.size(); ++r) {
        const auto& seq = *job->rows[r];
        const auto run = 1 + std::int64_t(job->drafted(r));  // a verify row computes its drafts' positions too
        pasts[r] = job->chain_rows[r] >= 0 ? dev_->kv_length(seq.seq) : seq.device_len;
        if (auto a = dev_->kv_apply(seq.seq, pasts[r] + run, options_.kv_apply_timeout); !a) {
            job->failed_row = int(r);
            return a;
        }
        job->counts[r] = run;
    }
    job->head.assign(job->rows.size(), device::head_mode::logits);
    if (head) {  // the chain source must be on the device in this generation
        const auto& src = job->chain_from;
        if (!assign_head_modes(*job, src && src->device_job != 0 && src->device_generation == generation_)) {
            job->unrun = true;
            job->chain_from = nullptr;
            return {};
        }
    }
    job->chain_from = nullptr;  // the device holds what it needs of it; do not keep its buffers alive
    job->t_fill = rt().now();
    auto id_or = submit_input(*dev_, profile.submodel, job->slot, encode_decode(*job, profile.batch, pasts, head), 0);
    if (!id_or) return id_or.error();
    if (metrics_) {
        metrics_->batch_size.observe(double(live));
        metrics_->batch_padding_rows.inc(double(profile.batch - live));
        if (job->chained()) metrics_->chained_steps.inc();
    }
    submit_wait(job, *id_or);
    return {};
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
    sync_fault_metrics();
    if (retries_job(cls, attempt, options_.retry_limit)) {
        start_timer(retry_delay(options_.retry_base, attempt),
                    [this, job, attempt] { (void)enqueue(da_execute{job, attempt + 1}, id()); });
        return;
    }
    (void)session_.tell(cs_job_done{job, e}, id());
}

void device_actor::on(da_completed& m) {
    if (m.generation != generation_) return;  // a job abandoned at a fault: never used
    if (auto* b = std::get_if<da_state::busy>(&state_); b && --b->in_flight == 0) move_to(da_state::ready{});
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

// D2H of what the job returns (job codec), each checked before it is released.
void device_actor::finish_job(const job_ptr& job, const device::job_result& r) {
    // A scoring prefill's scores first: reading "logits" (read_output) consumes the slot's outputs.
    if (job->scored_from >= 0)
        if (auto s = take_scores(*dev_, submodel_of(job), job->slot, *job->rows.front(), job->scored_from, job->counts[0]); !s)
            return fault(s.error(), job);
    if (auto out = read_outputs(*dev_, submodel_of(job), *job, check_pool_.get()); !out) return fault(out.error(), job);
    job->t_done = rt().now();
    job->device_compute_s = double(r.timing.compute_end_ns - r.timing.compute_start_ns) * 1e-9;
    if (metrics_) {
        metrics_->device_busy_seconds.inc(job->device_compute_s);
        metrics_->device_drawn_rows.inc(double(job->rows_in(device::head_mode::sample)));
        metrics_->device_topk_rows.inc(double(job->rows_in(device::head_mode::top_k)));
        metrics_->d2h_bytes.inc(double(d2h_bytes(*job)));
    }
    if (auto kept = drop_rejected(*job); !kept) return fault(kept.error(), job);
    for (std::size_t i = 0; i < job->rows.size(); ++i) {
        auto& seq = *job->rows[i];
        seq.device_len += job->counts[i];
        (void)kv_.tell(kv_extend{seq.seq, seq.device_len}, id());
    }
    (void)session_.tell(cs_job_done{job, {}}, id());
}

// A verify row's KV holds all 1 + d positions it computed; it keeps the ones its run
// emitted (kept drafts, cut where the request ends) before its next job (kv_keep), so
// the device's length is again device_len + counts (docs/device.md "Verify jobs").
void_result device_actor::drop_rejected(const job_context& job) {
    for (std::size_t r = 0; r < job.rows.size(); ++r) {
        const auto computed = 1 + std::int64_t(job.drafted(r));
        if (computed == 1 || job.counts[r] == computed) continue;
        const auto& seq = *job.rows[r];
        if (auto k = dev_->kv_keep(seq.seq, seq.device_len + job.counts[r]); !k) return k;
    }
    return {};
}

void device_actor::fault(const error_info& e, const job_ptr& culprit, bool attempt_failed) {
    if (in<da_state::dead>()) return;
    spdlog::warn("device fault: {}", e.what());
    sync_fault_metrics();
    ++generation_;
    auto rec = recovering().value_or(recovery{rt().now(), 0});
    if (attempt_failed) ++rec.failed_resets;
    if (!in<da_state::faulted>()) move_to(da_state::faulted{rec}, e.what());
    (void)session_.tell(cs_device_down{culprit, generation_}, id());
    move_to(da_state::resetting{rec});
    schedule_reset_step();
}

// The first attempt of a recovery runs at once; later ones back off (recovery_policy.hpp).
void device_actor::schedule_reset_step() {
    auto gen = generation_;
    const int failed = recovering().value_or(recovery{}).failed_resets;
    if (next_reset(failed, options_.reset_limit) != reset_next::attempt_after_backoff) {  // first, or giving up
        (void)enqueue(da_reset_step{gen}, id());
        return;
    }
    const auto ceiling = reset_backoff_ceiling({options_.reset_backoff, options_.reset_backoff_max}, failed);
    start_timer(equal_jitter(ceiling, jitter_), [this, gen] { (void)enqueue(da_reset_step{gen}, id()); });
}

void device_actor::on(da_reset& m) {
    if (in<da_state::dead>()) {
        // An operator's reset after the cause was cleared: a fresh recovery.
        spdlog::warn("device: reset requested while dead ({}): trying again", m.reason);
        ++generation_;
        (void)session_.tell(cs_device_down{nullptr, generation_}, id());  // the reset empties the device's KV
        move_to(da_state::resetting{recovery{rt().now(), 0}}, "operator reset: " + m.reason);
        schedule_reset_step();
        return;
    }
    if (!in<da_state::ready>() && !in<da_state::busy>() && !in<da_state::warmup>()) return;
    fault(make_error(status::not_ready, "reset requested: " + m.reason));
}

void device_actor::on(da_reset_step& m) {
    const auto* resetting = std::get_if<da_state::resetting>(&state_);
    if (m.generation != generation_ || !resetting) return;
    auto rec = resetting->recovering;
    if (next_reset(rec.failed_resets, options_.reset_limit) == reset_next::give_up) {
        spdlog::error("device dead after {} failed resets", rec.failed_resets);
        move_to(da_state::dead{});
        (void)session_.tell(cs_device_dead{}, id());
        return;
    }
    auto r = dev_->reset();
    sync_fault_metrics();
    if (!r) {
        ++rec.failed_resets;
        spdlog::warn("device reset failed ({} of {}): {}", rec.failed_resets, options_.reset_limit, r.error().what());
        move_to(da_state::resetting{rec}, "reset failed: " + std::string(r.error().what()));
        schedule_reset_step();
        return;
    }
    resets_.fetch_add(1);
    if (metrics_) metrics_->device_resets.inc();
    move_to(da_state::warmup{rec});
    start_golden();
}

void device_actor::on(da_kv_free& m) { (void)dev_->kv_free(m.seq); }

// A prefix cache hit: the new sequence starts as a copy of the cached one's first
// tokens. When the copy fails (a fault, a reset since), its prefill sees the device
// holding less than it expects and feeds the whole prompt (fill_prefill).
void device_actor::on(da_kv_copy& m) {
    // Decided before the KvManager heard of a reset: the source's KV is gone. The prefill
    // then feeds the whole prompt, as after any failed copy.
    if (m.generation != generation_) return;
    (void)dev_->kv_free(m.dst);  // stale KV from before a reset or preemption, if any
    void_result r = dev_->kv_allocate(m.dst, m.reserve);
    if (r) r = dev_->kv_copy(m.src, m.dst, m.tokens);
    if (!r) {
        sync_fault_metrics();
        spdlog::debug("prefix cache copy {} -> {} ({} tokens) failed: {}; prefilling the whole prompt", m.src, m.dst,
                      m.tokens, r.error().what());
    }
}

void device_actor::on(da_kv_keep& m) {
    if (m.generation == generation_) (void)dev_->kv_keep(m.seq, m.tokens);  // else a reset freed it since
}

}  // namespace calserve::actors
