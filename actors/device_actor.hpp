#pragma once
//! DeviceActor: owns the device handle (one per VirtualDevice), serialises every
//! device call, and keeps the device's health as an explicit state machine: the
//! states (names, gauge codes) are device/health.hpp's; their legal transitions:
//!
//!   unconfigured --> configuring --> warmup --> ready <--> busy
//!                        |              |         |          |
//!                        v              v         +--> faulted <--+
//!                      dead          faulted          |
//!                                                     v
//!                         dead <-- resetting <--------+
//!                                     |  ^ (reset failed, below the limit)
//!                                     v  |
//!                                   warmup --> ready
//!   dead --> resetting  (operator reset only)
//!
//! Fault handling by class (config/status.hpp): retryable (submit_busy) and
//! capacity (KV refused) are retried with bounded exponential backoff, then the
//! job fails; request and model faults fail only that job's request; device
//! faults (wait_timeout, ccu_exception, device_lost, h2d/d2h errors, NaN/Inf
//! logits) move to `faulted`: jobs in flight are abandoned (their completions,
//! if any, are ignored by generation), the ChipSession is told, and the device
//! is reset, warmed up and golden-checked before `ready` again. After
//! `device.reset_limit` consecutive failed resets the device is `dead`.
//!
//! Reset backoff: the first reset attempt of a recovery runs at once; each
//! further attempt (a reset that failed, or a warm-up/golden check that faulted
//! again) waits `reset_backoff` x 2^(failures - 1), capped at `reset_backoff_max`,
//! with "equal jitter" (a uniform draw in [d/2, d]) from a generator seeded by
//! `jitter_seed`, so a seed or a trace replays the same waits. A short fault burst
//! (a few ms of ccu_exception) is thereby spread out instead of exhausting the
//! limit within the burst.
//! Dead is not final: an operator's `device reset` (da_reset) starts a fresh
//! recovery with the failure count at zero; if the cause is gone the device
//! comes back to `ready` and the ChipSession is told `cs_device_up`.
//! Fail closed: logits of a job are only released after the NaN/Inf check, and
//! never from a job that completed after a fault was declared.
#include <array>
#include <random>

#include "actors/runtime/actor.hpp"
#include "actors/device_actor_messages.hpp"
#include "actors/engine_journal.hpp"
#include "actors/runtime/lifecycle.hpp"
#include "device/fault_points.hpp"
#include "device/health.hpp"
#include "device/sampling_head.hpp"

namespace calserve::metrics {
struct calserve_metrics;
}

namespace calserve::model {
class thread_pool;
}

namespace calserve::actors {

class chip_session_actor;
class kv_manager_actor;

using device::device_health;

inline constexpr std::array<transition<device_health>, 15> k_device_health_table{{
    {device_health::unconfigured, device_health::configuring},
    {device_health::configuring, device_health::warmup},
    {device_health::configuring, device_health::dead},
    {device_health::warmup, device_health::ready},
    {device_health::warmup, device_health::faulted},
    {device_health::ready, device_health::busy},
    {device_health::busy, device_health::ready},
    {device_health::ready, device_health::faulted},
    {device_health::busy, device_health::faulted},
    {device_health::faulted, device_health::resetting},
    {device_health::resetting, device_health::warmup},
    {device_health::resetting, device_health::resetting},
    {device_health::resetting, device_health::dead},
    {device_health::ready, device_health::resetting},
    {device_health::dead, device_health::resetting},
}};

// A decode program of the package: its batch size (profile) and exact name.
struct decode_profile {
    std::int64_t batch = 1;
    std::string submodel;
};

// The KV sequence of the warm-up's golden prefill (never a request's: requests count up from 1).
inline constexpr device::seq_id k_golden_sequence = ~device::seq_id{0} - 1;

struct device_actor_options {
    std::string prefill_submodel;
    // Most tokens one prefill job feeds (runtime.prefill_chunk; 0 = the whole prompt):
    // a longer prompt is prefilled in chunks that interleave with decode batches.
    std::int64_t prefill_chunk = 0;
    std::vector<decode_profile> decode_profiles;            // ascending batch; at least batch 1
    // Wait bound of a job: max(wait_timeout, wait_cost_factor x the device's expected
    // completion of it). The floor catches hangs of cheap jobs; the factor gives an
    // expensive job (a long prefill, a slow host) room in proportion to its cost.
    std::chrono::nanoseconds wait_timeout{std::chrono::seconds(10)};
    double wait_cost_factor = 4;
    std::chrono::nanoseconds kv_apply_timeout{std::chrono::seconds(1)};
    int reset_limit = 3;
    int retry_limit = 6;                                    // submit_busy / KV refusals
    std::chrono::nanoseconds retry_base{std::chrono::milliseconds(1)};
    std::chrono::nanoseconds reset_backoff{std::chrono::milliseconds(50)};      // 0 = no wait between attempts
    std::chrono::nanoseconds reset_backoff_max{std::chrono::seconds(5)};
    std::uint64_t jitter_seed = 1;                          // device.sim.seed: replays draw the same jitter
    // The injected-fault registry the device consults (may be null): faults_total{point}
    // is counted from its fires, so the metric equals what was injected, per point.
    std::shared_ptr<device::fault_registry> faults;
    // Threads that share the NaN/Inf check of a batch's logits (runtime.sampler_threads):
    // one pass over 16 x 151,936 BF16 values is most of a step's host time.
    int check_threads = 1;
    // device.sampling_head: rows that need only their logits are drawn by the decode
    // programs' sampling head, when the package has one (docs/device.md "Sampling head"),
    // and rows whose token and logprobs follow from the head's top K get only those.
    bool sampling_head = true;
};

// The host's NaN/Inf check of a job's `rows` live rows of logits, rows shared among
// the pool's threads (null: this thread); the error names the first bad logit.
void_result check_logits_rows(std::span<const std::byte> logits, std::size_t rows, model::thread_pool* pool);

// Sampling head (docs/device.md): the "sample_params" rows of a decode job's live rows
// (drawn rows with their parameters and RNG state, chained rows naming their source row);
// and the head's draws ("sampled", "rng_state") of the drawn rows into job.drawn_tokens /
// drawn_rng, logits_nan when the head drew no token for one.
void head_params_of(const job_context& job, std::span<device::head_row> out);
void_result take_draws(job_context& job, std::span<const std::byte> tokens, std::span<const std::byte> states);
// The head's top K, their ids and log_z ("topk_logits", "topk_ids", "lse") into
// job.topk_*; logits_nan when a top-k row holds no finite summary.
void_result take_top_k(job_context& job, std::span<const std::byte> logits, std::span<const std::byte> ids,
                       std::span<const std::byte> log_z);
// What the head returns for one row of a program whose head has top-k `head_k` (0: none).
device::head_mode head_mode_of(const sequence_state& seq, std::int64_t head_k, std::int64_t vocab);

class device_actor : public actor<device_actor, device_actor_message> {
public:
    device_actor(runtime& rt, std::shared_ptr<device::device> dev, device_actor_options options,
                 metrics::calserve_metrics* metrics);
    ~device_actor();
    void wire(address<chip_session_actor> session, address<kv_manager_actor> kv);
    // Where state transitions (but ready <-> busy) are recorded for the console (may stay null).
    void set_journal(std::shared_ptr<engine_journal> journal) { journal_ = std::move(journal); }

    void on_message(device_actor_message& msg);

    device_health health() const { return state_.load(); }
    std::uint64_t resets() const { return resets_.load(); }

private:
    void on(da_start&);
    void on(da_execute& m);
    void on(da_completed& m);
    void on(da_golden_done& m);
    void on(da_kv_free& m);
    void on(da_kv_copy& m);
    void on(da_kv_keep& m);
    void on(da_reset& m);
    void on(da_reset_step& m);
    void on(da_golden_retry& m);

    void_result fill_and_submit(const job_ptr& job);
    void_result fill_prefill(const job_ptr& job);
    void_result fill_decode(const job_ptr& job);
    // The sampling head's parameters of a decode job's rows (and their chain sources);
    // false when a chained row's source job was never submitted (the job goes back unrun).
    bool fill_head(const job_ptr& job);
    void_result read_draws(const job_ptr& job, const std::string& sm);
    void_result read_top_k(const job_ptr& job, const std::string& sm);
    void_result read_logits(const job_ptr& job, const std::string& sm);
    // How long to wait for `job` before declaring the device hung (options, wait_timeout).
    std::chrono::nanoseconds wait_bound(device::job_id job) const;
    void submit_wait(const job_ptr& job, device::job_id id);
    void finish_job(const job_ptr& job, const device::job_result& r);
    void fail_job(const job_ptr& job, const error_info& e, int attempt);
    void fault(const error_info& e, const job_ptr& culprit = nullptr);
    void start_golden();
    void submit_golden(int attempt);
    void golden_failed(const error_info& e);
    void schedule_reset_step();
    std::chrono::nanoseconds reset_backoff();
    bool move_to(device_health next, std::string note = {});  // note: the fault or reset reason
    const std::string& submodel_of(const job_ptr& job) const;
    const decode_profile* profile_for(std::int64_t rows) const;
    void sync_fault_metrics();

    std::shared_ptr<device::device> dev_;
    device_actor_options options_;
    std::vector<std::int64_t> profile_batches_;  // options_.decode_profiles' batches (pick_profile's input)
    std::vector<bool> profile_heads_;            // the profile's program ends in a sampling head (and it is on)
    std::vector<std::int64_t> profile_head_k_;   // its K (0 without a head)
    metrics::calserve_metrics* metrics_;
    std::shared_ptr<engine_journal> journal_;
    address<chip_session_actor> session_;
    address<kv_manager_actor> kv_;
    lifecycle<device_health, k_device_health_table.size()> lifecycle_;
    std::atomic<device_health> state_{device_health::unconfigured};
    std::atomic<std::uint64_t> resets_{0};
    std::uint64_t generation_ = 0;      // bumped at every fault: older completions are stale
    int in_flight_ = 0;
    int failed_resets_ = 0;
    std::chrono::nanoseconds fault_at_{0};
    std::vector<std::uint16_t> golden_logits_;  // from the first warm-up: recovery must reproduce them
    std::vector<std::uint16_t> golden_scratch_;
    std::array<std::uint64_t, device::k_fault_point_count> counted_fires_{};  // fires already in faults_total
    std::unique_ptr<model::thread_pool> check_pool_;  // null: the check runs on the actor's thread
    std::mt19937_64 jitter_;            // reset backoff jitter; drawn only on the actor's strand
};

}  // namespace calserve::actors
