#pragma once
//! DeviceActor: the device's supervisor. It owns the device handle (one per
//! VirtualDevice), serialises every device call, and keeps the device's health
//! as an explicit state machine: the states (names, gauge codes) are
//! device/health.hpp's; their legal transitions (k_device_health_table):
//!
//!   unconfigured --> configuring --> warmup --> ready <--> busy
//!   configuring --> dead                 (configure failed)
//!   warmup, ready, busy --> faulted      (device fault, failed golden check, reset request)
//!   faulted --> resetting --> warmup     (reset done: warm-up and golden check again)
//!   resetting --> resetting              (reset failed, below the limit)
//!   resetting --> dead                   (past the limit)
//!   dead --> resetting                   (operator reset only)
//!
//! The state is one variant (`da_state`) of per-state structs holding that state's
//! data: `busy` its jobs in flight, `faulted`/`resetting` and a warm-up after a
//! fault the `recovery` (when it began, failed attempts); `health()` is its name,
//! published for other threads. What a job writes and returns is the job codec's
//! (actors/job_codec.hpp); when to retry and how long to back off is the recovery
//! policy's (actors/recovery_policy.hpp).
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
#include <optional>
#include <random>
#include <variant>

#include "actors/runtime/actor.hpp"
#include "actors/device_actor_messages.hpp"
#include "actors/engine_journal.hpp"
#include "actors/recovery_policy.hpp"
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

inline constexpr std::array<transition<device_health>, 14> k_device_health_table{{
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
    {device_health::dead, device_health::resetting},
}};

// The DeviceActor's state: one struct per health state, holding that state's data.
namespace da_state {
struct unconfigured { static constexpr auto health = device_health::unconfigured; };
struct configuring { static constexpr auto health = device_health::configuring; };
struct warmup {
    static constexpr auto health = device_health::warmup;
    std::optional<recovery> recovering;   // absent: the first warm-up
};
struct ready { static constexpr auto health = device_health::ready; };
struct busy {
    static constexpr auto health = device_health::busy;
    int in_flight = 1;                    // jobs submitted in this generation, not yet completed
};
struct faulted {
    static constexpr auto health = device_health::faulted;
    recovery recovering;
};
struct resetting {
    static constexpr auto health = device_health::resetting;
    recovery recovering;
};
struct dead { static constexpr auto health = device_health::dead; };
}  // namespace da_state
using device_actor_state = std::variant<da_state::unconfigured, da_state::configuring, da_state::warmup,
                                        da_state::ready, da_state::busy, da_state::faulted, da_state::resetting,
                                        da_state::dead>;
constexpr device_health health_of(const device_actor_state& s) {
    return std::visit([](const auto& st) { return st.health; }, s);
}

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
    // The time one chunk may take beside other sequences (runtime.prefill_chunk_ms; 0 =
    // chunks of `prefill_chunk` tokens): the chunk is the most tokens the device prices
    // within it (schedule_policy: prefill_chunk_limit).
    std::chrono::nanoseconds prefill_chunk_target{0};
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

class device_actor : public actor<device_actor, device_actor_message> {
public:
    device_actor(runtime& rt, std::shared_ptr<device::device> dev, device_actor_options options,
                 metrics::calserve_metrics* metrics);
    ~device_actor();
    void wire(address<chip_session_actor> session, address<kv_manager_actor> kv);
    // Where state transitions (but ready <-> busy) are recorded for the console (may stay null).
    void set_journal(std::shared_ptr<engine_journal> journal) { journal_ = std::move(journal); }

    void on_message(device_actor_message& msg);

    device_health health() const { return published_.load(); }
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
    // One decode step of every live row, padded to the smallest profile that holds them.
    void_result fill_decode(const job_ptr& job);
    // How long to wait for `job` before declaring the device hung (options, wait_timeout).
    std::chrono::nanoseconds wait_bound(device::job_id job) const;
    void submit_wait(const job_ptr& job, device::job_id id);
    void_result drop_rejected(const job_context& job);
    void finish_job(const job_ptr& job, const device::job_result& r);
    void fail_job(const job_ptr& job, const error_info& e, int attempt);
    // A device fault: abandon the jobs in flight and start (or continue) a recovery;
    // `attempt_failed`: a recovery's warm-up or golden check failed (a failed reset).
    void fault(const error_info& e, const job_ptr& culprit = nullptr, bool attempt_failed = false);
    void start_golden();
    void submit_golden(int attempt);
    void golden_failed(const error_info& e);
    void_result golden_check(const result<device::job_result>& outcome);
    void schedule_reset_step();
    bool move_to(device_actor_state next, std::string note = {});  // note: the fault or reset reason
    template <class State>
    bool in() const { return std::holds_alternative<State>(state_); }
    // The recovery under way (faulted, resetting, a warm-up after a fault); nullopt when none is.
    std::optional<recovery> recovering() const;
    const std::string& submodel_of(const job_ptr& job) const;
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
    device_actor_state state_;
    std::atomic<device_health> published_{device_health::unconfigured};  // health_of(state_), for other threads
    std::atomic<std::uint64_t> resets_{0};
    std::uint64_t generation_ = 0;      // bumped at every fault: older completions are stale
    std::vector<std::uint16_t> golden_logits_;  // from the first warm-up: recovery must reproduce them
    std::vector<std::uint16_t> golden_scratch_;
    std::array<std::uint64_t, device::k_fault_point_count> counted_fires_{};  // fires already in faults_total
    std::unique_ptr<model::thread_pool> check_pool_;  // null: the check runs on the actor's thread
    std::mt19937_64 jitter_;            // reset backoff jitter; drawn only on the actor's strand
};

}  // namespace calserve::actors
