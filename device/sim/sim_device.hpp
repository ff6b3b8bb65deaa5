#pragma once
//! The simulated Calculet NPU: a peer implementation of `device::device` that keeps
//! CalRT's contract (ping/pong buffers, CSR registers, slicing, non-blocking infer +
//! Wait, KV allocate/apply/free/clear, reset/warm-up, per-chip memory accounting)
//! and computes real numbers with the reference transformer (`model::causal_lm`,
//! tensor-parallel over the package's chips), written to the output buffer as BF16.
//! A batched decode job (`infer_rows`) runs one `decode_batch` over its live rows;
//! padding rows are costed by the latency model and left zero in the logits.
//!
//! Time: the simulator does not own its clock. It is handed a `sim_scheduler`; with
//! a virtual one (deterministic mode) the reference model runs inline in `infer()`
//! and completions happen in virtual time; with the real-time one the model runs on
//! the simulator's own compute thread (callers never block) and completions fire
//! from timers at the modelled instants. Job pipeline, each stage a FIFO engine:
//!   H2D (inputs over PCIe) -> compute (latency model or device.sim.step_ms)
//!   -> D2H (output over PCIe or device.sim.d2h_ms)
//! so one slot's output copy overlaps the other slot's compute, as DMA engines do.
//! A job completes when both its modelled D2H end has passed and its numbers exist.
//!
//! Fault model: injected faults come from a shared `fault_registry` (see
//! fault_points.hpp and docs/faults.md for each point's effect here).
//!
//! Invariants: at most one job per slot, two in flight; completions in submission
//! order (a hung job holds back the one behind it, as on hardware); a slot's
//! outputs are only readable when it has no job in flight; per-chip memory used
//! never exceeds the configured capacity (configure refuses instead); reset leaves
//! no job, KV sequence or model state behind (an epoch counter makes any compute
//! still running for a discarded job a no-op).
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "config/config.hpp"
#include "device/device.hpp"
#include "device/fault_points.hpp"
#include "device/sim/kv_pool.hpp"
#include "device/sim/host_cost.hpp"
#include "device/sim/latency_model.hpp"
#include "device/sim/scheduler.hpp"
#include "device/sampling_head.hpp"
#include "model/core/causal_lm.hpp"
#include "model/cpu/kernels.hpp"
#include "model/sampling/sampling.hpp"

namespace calserve::device::sim {

using model_factory = std::function<result<std::unique_ptr<model::causal_lm>>(const package_spec&)>;

struct sim_options {
    std::uint64_t seed = 1;
    latency_constants latency;
    std::uint32_t board_chips = 2;        // the documented board: one VirtualDevice, two chips
    std::uint32_t calcores_per_chip = 2;
    std::uint64_t dram_bytes_per_chip = 17179869184ULL;
    std::uint64_t sram_bytes_per_chip = 67108864ULL;
    std::int64_t kv_block_tokens = 256;
    std::string cost_package;             // package whose figures drive the latency model; empty = the loaded one
    double slow_infer_default_ms = 0;     // slow_infer with delay_ms 0 adds 4 x the modelled step instead
    sim_scheduler* scheduler = nullptr;   // required, not owned; must outlive pending events' effects
    std::shared_ptr<fault_registry> faults;  // shared with the control socket; created when null
    model_factory make_model;             // builds the reference model at configure
    model::arithmetic arithmetic = model::arithmetic::fp32;  // make_model's mode (device_info::arithmetic)
    // prefill_cost and decode_cost of a job the latency model prices at nothing (the cpu
    // backend) by the host's measured rates (real time only). Off in a recordable daemon: a measured rate
    // is not in the trace, so a replay could not size the chunks it sized.
    bool price_by_host_rates = true;

    // Constants and capacities from `device.sim.*`; the caller supplies scheduler and factory.
    static sim_options from_config(const config& cfg);
};

// Per-chip residency of a configured package: parameters, the KV shard, the largest
// submodel workspace, every submodel's command buffers and ping+pong I/O buffers,
// against the capacities of `o`. configure() refuses when any chip is over.
std::vector<memory_usage> plan_memory(const package_spec& spec, const sim_options& o);

class sim_device final : public device, public std::enable_shared_from_this<sim_device> {
public:
    static std::shared_ptr<sim_device> create(sim_options options);
    ~sim_device() override;
    sim_device(const sim_device&) = delete;
    sim_device& operator=(const sim_device&) = delete;

    const device_info& info() const override { return info_; }
    device_status status() const override;
    void_result load(const package_spec& spec) override;
    const package_spec& package() const override { return spec_; }
    std::vector<std::string> submodel_names() const override;
    result<submodel_desc> submodel(std::string_view exact_name) const override;
    result<configure_report> configure() override;
    void_result warmup() override;
    void_result reset() override;

    void_result slice(std::string_view submodel, slot s, std::int64_t tokens) override;
    void_result write_input(std::string_view submodel, slot s, std::string_view tensor,
                            std::span<const std::byte> data) override;
    void_result write_csr(std::string_view submodel, slot s, std::string_view csr, std::uint32_t value) override;
    void_result write_csr_row(std::string_view submodel, slot s, std::string_view csr, std::int64_t row,
                              std::uint32_t value) override;
    result<std::span<const std::byte>> output(std::string_view submodel, slot s, std::string_view tensor) const override;
    // Hands the output buffer over (no copy: the D2H cost is the latency model's d2h_ms).
    void_result read_output(std::string_view submodel, slot s, std::string_view tensor,
                            std::vector<std::byte>& host) override;

    result<job_id> infer(std::string_view submodel, slot s, seq_id sequence) override;
    result<job_id> infer_rows(std::string_view submodel, slot s, std::span<const seq_id> rows) override;
    result<job_result> wait(job_id job, timeout limit) override;
    void wait_async(job_id job, timeout limit, completion_callback done) override;
    timeout expected_completion(job_id job) const override;
    timeout prefill_cost(std::int64_t tokens, std::int64_t past) const override;
    timeout decode_cost(std::int64_t rows, std::int64_t positions, std::int64_t past) const override;

    bool kv_can_allocate(std::int64_t tokens) const override;
    void_result kv_allocate(seq_id sequence, std::int64_t reserve_tokens) override;
    void_result kv_apply(seq_id sequence, std::int64_t total_tokens, timeout limit) override;
    void_result kv_free(seq_id sequence) override;
    void_result kv_clear() override;
    void_result kv_copy(seq_id src, seq_id dst, std::int64_t tokens) override;
    void_result kv_keep(seq_id sequence, std::int64_t tokens) override;
    kv_usage kv() const override;
    std::int64_t kv_length(seq_id sequence) const override;

    fault_registry& faults() { return *options_.faults; }
    const latency_model* latency() const { return latency_ ? &*latency_ : nullptr; }
    sim_scheduler& scheduler() { return *options_.scheduler; }
    // Modelled compute busy time (ns) since creation: the busy fraction's numerator.
    std::int64_t compute_busy_ns() const;
    // Job records still allocated (in flight, awaiting collection, or held by a
    // pending callback). A finished, delivered job must not linger: each one
    // carried a vocabulary-sized logits buffer.
    std::int64_t jobs_alive() const { return jobs_alive_->load(); }
    // Calls the runtime must never make: a job or KV call (kv_free aside, which frees
    // "stale KV, if any") answered unknown_sequence or sequence_exists, i.e. about a
    // sequence the device does not hold, or allocating one it already holds. The soak's
    // invariant (docs/soak.md); `last` describes the latest.
    struct sequence_misuse {
        std::uint64_t count = 0;
        std::string last;
    };
    sequence_misuse sequence_misuses() const;

private:
    explicit sim_device(sim_options options);

    // One submodel x one slot: the host-visible halves of its input/output buffers.
    struct buffer_set {
        std::int64_t sliced_tokens = -1;  // -1 = not sliced: full max_tokens
        std::vector<std::vector<std::byte>> inputs;
        std::vector<bool> written;
        std::uint64_t written_bytes = 0;
        std::vector<std::optional<std::uint32_t>> csr_cur;   // one register per batch row
        std::vector<std::optional<std::uint32_t>> csr_past;
        std::vector<std::vector<std::byte>> outputs;         // allocated by the first completed job
        bool output_valid = false;
    };
    enum class job_fate : std::uint8_t { ok, hang, ccu_exception, d2h_error, device_lost };
    struct job {
        job_id id = 0;
        std::size_t submodel_index = 0;
        calserve::device::slot slot = calserve::device::slot::ping;
        std::vector<seq_id> rows;          // as submitted, k_padding_row included
        std::vector<std::int64_t> pasts;   // per row, tokens held before the job (0 for padding)
        seq_id sequence = 0;               // first live row
        std::int64_t past = 0;             // its past
        std::int64_t row_tokens = 0;       // tokens per row (cur_seq_len)
        std::vector<model::token_id> tokens;  // rows x row_tokens, row-major
        std::uint64_t epoch = 0;
        job_fate fate = job_fate::ok;
        bool poison_logits = false;
        job_timing timing;
        std::int64_t expected_done_ns = 0;  // modelled completion without injected delays
        job_kind kind = job_kind::decode;
        double host_work = 0;               // host_cost_model::work of its live rows
        bool decode_program = false;        // a decode submodel's step (plain or verify rows)
        std::vector<std::byte> logits_out;  // the logits output as the device writes it, by the compute stage
        // Sampling head (device/sampling_head.hpp): the rows' parameters as submitted (empty: the
        // job wrote no sample_params, every row is logits), the job each chained row takes its
        // token and RNG state from, and what the head computed (model_mutex_ guards them until
        // the compute stage is done; then they are read-only).
        std::vector<head_row> head;
        std::vector<std::shared_ptr<job>> chain_from;
        std::int64_t head_k = 0;
        bool head_done = false;
        std::vector<std::int32_t> sampled;     // per row, -1 when not drawn (or the draw failed)
        std::vector<std::uint64_t> rng_out;    // 4 per row
        std::vector<float> topk_logits;        // head_k per row
        std::vector<std::int32_t> topk_ids;
        std::vector<double> lse;               // per row: log_z (model::top_k_row)
        // Verify rows (sim_verify.cpp): positions per row (1 + drafts; 0 padding; empty: no row
        // drafts), the drafts (k_verify_drafts_max per row), every live position's BF16 logits
        // in row order, and what the head kept per row.
        std::vector<std::int64_t> runs;
        std::vector<model::token_id> drafts;
        std::vector<std::byte> verify_bf16;
        std::vector<std::int32_t> accepted;
        // Scoring prefill (sim_score.cpp): "score_request" as written (target, top-N per
        // position; empty: a plain prefill) and what the scoring computed per position.
        std::vector<std::int32_t> score_request;
        std::vector<float> score_logprobs;
        std::vector<std::int32_t> score_top_ids;       // k_score_top_max per position
        std::vector<float> score_top_logprobs;
        bool compute_done = false;
        bool timer_done = false;
        bool finished = false;
        std::optional<result<job_result>> outcome;
        completion_callback callback;
        bool delivered = false;  // the callback (result or timeout) has run
        std::shared_ptr<std::atomic<std::int64_t>> alive;  // the device's jobs_alive counter
        job() = default;
        job(const job&) = delete;
        job& operator=(const job&) = delete;
        ~job() {
            if (alive) alive->fetch_sub(1);
        }
    };
    using job_ptr = std::shared_ptr<job>;
    using pending_calls = std::vector<std::function<void()>>;

    // Serial worker running the reference model in real-time mode (FIFO).
    class compute_worker {
    public:
        compute_worker();
        ~compute_worker();
        void post(std::function<void()> task);
        void clear_pending();

    private:
        void run(std::stop_token stop);
        std::mutex mutex_;
        std::condition_variable_any cv_;
        std::deque<std::function<void()>> tasks_;
        std::jthread thread_;
    };

    // All private helpers expect mutex_ held unless named *_unlocked.
    void_result check_usable(bool need_ready) const;
    void_result check_kv_bookkeeping() const;
    result<std::size_t> find_index(std::string_view submodel) const;
    buffer_set& buffers(std::size_t index, slot s) { return buffers_[index * k_slot_count + index_of(s)]; }
    const buffer_set& buffers(std::size_t index, slot s) const { return buffers_[index * k_slot_count + index_of(s)]; }
    std::int64_t tokens_of(const submodel_desc& sm, const buffer_set& b) const;
    void_result validate_job(const submodel_desc& sm, const buffer_set& b, std::span<const seq_id> rows,
                             std::span<const head_row> head) const;
    void_result validate_row(const submodel_desc& sm, const buffer_set& b, std::size_t row, seq_id seq,
                             bool chained) const;
    // Sampling head (sim_head.cpp): the rows of "sample_params" if written, the chain
    // sources they name, the head's compute and its D2H bytes.
    std::vector<head_row> head_rows(const submodel_desc& sm, const buffer_set& b) const;
    result<std::vector<std::shared_ptr<job>>> resolve_chain(std::span<const head_row> head,
                                                            std::span<const seq_id> rows) const;
    void_result take_chained_tokens(job& j) const;   // model_mutex_ held
    void run_head(job& j, std::span<const std::byte> bf16_logits);  // model_mutex_ held
    void remember_head_job(const std::shared_ptr<job>& j);
    std::uint64_t output_bytes(const job& j, const submodel_desc& sm) const;
    // Verify jobs (sim_verify.cpp): the rows' runs from their cur_seq_len, the drafts'
    // checks, one pass over every position, and the head's draws along the drafts.
    bool may_verify(const submodel_desc& sm, const buffer_set& b) const;
    void_result validate_drafts(const submodel_desc& sm, const buffer_set& b, std::span<const seq_id> rows,
                                std::span<const head_row> head) const;
    void take_verify_inputs(job& j, const submodel_desc& sm, const buffer_set& b) const;
    void_result compute_verify(job& j, std::vector<float>& logits);  // model_mutex_ held
    void draw_verify_row(job& j, std::size_t row, model::request_rng& rng);  // model_mutex_ held
    void write_head_outputs(job& j, const submodel_desc& sm, buffer_set& b) const;
    // Scoring prefills (sim_score.cpp): whether the job wrote "score_request", its checks,
    // the request taken at submit, every position's logits and scores, and the outputs.
    bool wrote_score_request(const submodel_desc& sm, const buffer_set& b) const;
    void_result validate_score_request(const submodel_desc& sm, const buffer_set& b) const;
    void forget_score_request(const submodel_desc& sm, buffer_set& b) const;
    void take_score_inputs(job& j, const submodel_desc& sm, const buffer_set& b) const;
    void_result compute_scored(job& j, std::vector<float>& logits);  // model_mutex_ held
    void write_score_outputs(const job& j, const submodel_desc& sm, buffer_set& b) const;
    step_breakdown modelled_step(const job& j, const submodel_desc& sm) const;
    std::vector<std::uint64_t> live_rows(const job& j) const;
    void decide_fate(job& j, const submodel_desc& sm, double& extra_compute_ms, double& extra_done_ms);
    void schedule_timing(job& j, const submodel_desc& sm, std::uint64_t h2d_bytes, double extra_compute_ms,
                         double extra_done_ms);
    std::vector<model::token_id> snapshot_tokens(const submodel_desc& sm, const buffer_set& b) const;
    void_result compute_rows(job& j, std::vector<float>& logits);  // model_mutex_ held
    void run_model(const job_ptr& j);                                 // compute stage (any thread)
    void on_compute_done(const job_ptr& j, pending_calls& calls);
    void on_timer(job_id id);
    void complete_head(pending_calls& calls);
    void finish(job& j, pending_calls& calls);
    void encode_logits(const job& j, std::vector<float>& logits, std::vector<std::byte>& out) const;  // no lock
    void write_logits(job& j);
    result<std::size_t> output_index(std::string_view submodel, slot s, std::string_view tensor) const;
    void set_state(device_state next, std::string why);
    void discard_all(std::string_view why, pending_calls& calls);
    void post_model_task(std::function<void()> task);
    void pause(double ms) const;  // real sleep or virtual-time drive, lock NOT held
    void reset_buffers();
    static void run_calls(pending_calls& calls);

    sim_options options_;
    std::shared_ptr<std::atomic<std::int64_t>> jobs_alive_ = std::make_shared<std::atomic<std::int64_t>>(0);
    device_info info_;
    mutable std::mutex mutex_;
    std::condition_variable cv_;  // job completions, for blocking wait()
    device_state state_ = device_state::created;
    std::string last_error_;
    package_spec spec_;
    std::optional<latency_model> latency_;
    std::optional<kv_pool> kv_;
    std::unordered_map<seq_id, std::int64_t> seq_length_;  // tokens submitted per sequence
    std::vector<buffer_set> buffers_;                       // submodel-major, k_slot_count per submodel
    std::optional<job_id> slot_job_[k_slot_count];
    std::deque<job_ptr> in_flight_;                         // submission order
    std::unordered_map<job_id, job_ptr> jobs_;              // in flight or finished, until consumed
    job_id next_job_ = 1;
    std::uint64_t epoch_ = 0;                               // bumped by reset
    std::int64_t h2d_free_ns_ = 0, compute_free_ns_ = 0, d2h_free_ns_ = 0;
    std::int64_t compute_busy_ns_ = 0;
    std::uint64_t jobs_submitted_ = 0, jobs_completed_ = 0, resets_ = 0;
    sequence_misuse misuse_;  // guarded by mutex_
    // Counts `r` when it answers about a sequence not held (or already held); returns it.
    void_result note_misuse(void_result r, std::string_view call);
    std::vector<memory_usage> memory_;
    // Logits buffers of finished jobs, reused by the next computes (one per slot is
    // enough): a B16 step's 9.7 MB was allocated, zeroed and freed every step.
    // The compute stage also encodes the output (BF16) off the completion path, which then
    // only swaps it into the slot's buffer; the slot's previous buffer is the next spare.
    static constexpr std::size_t k_spare_logits = 2;
    std::vector<std::vector<float>> spare_logits_;       // guarded by mutex_
    std::vector<std::vector<std::byte>> spare_encoded_;  // guarded by mutex_

    host_cost_model host_cost_;  // guarded by mutex_; learned from real-time computes only

    // Jobs whose head output a later job may still chain from (the last few submitted
    // with a sampling head), cleared by reset. Guarded by mutex_.
    static constexpr std::size_t k_chain_window = 4;
    std::deque<std::shared_ptr<job>> head_jobs_;
    model::sampler head_sampler_;  // the head's scratch; guarded by model_mutex_
    model::sampler score_sampler_;  // scoring prefills' scratch; guarded by model_mutex_

    std::mutex model_mutex_;  // the reference model is not thread-safe
    std::unique_ptr<model::causal_lm> model_;
    std::unique_ptr<compute_worker> worker_;  // real-time mode only; joined first in the destructor
};

}  // namespace calserve::device::sim
