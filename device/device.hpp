#pragma once
//! The device interface: CalRT's semantics as one abstract class, so the runtime
//! drives a simulated NPU today and a thin CalRT adapter the day the SDK exists.
//! docs/device.md maps every call to the CalRT call it stands for.
//!
//! Lifecycle (state diagram; `status().state`):
//!
//!   created --load--> loaded --configure--> configured --warmup--> ready
//!                                               ^                    |
//!                                               |        ccu_exception, d2h_error,
//!                                             reset       h2d_error -> faulted
//!                                               |         device_lost -> lost
//!                                   faulted/lost/ready/configured <--+
//!
//! `infer` needs `ready`; `faulted` and `lost` refuse work (not_ready / device_lost)
//! until `reset` (which discards jobs in flight and clears every KV sequence, so the
//! runtime re-prefills them) and `warmup`.
//!
//! Job protocol for one submodel and one slot (ping or pong):
//!   slice(tokens) -> write_input(each input) -> write_csr(cur_seq_len, past_kv) ->
//!   infer(seq) -> [wait | wait_async] -> output(...) read until the slot's next infer.
//! Every input and both CSRs must be written again before each infer (else
//! missing_tensor / bad_csr): stale inputs are a caller bug the device reports.
//!
//! Batched decode (a submodel with batch B > 1; docs/device.md "Batched jobs"):
//!   slice(1) -> write_input "token" and "position" with B int32 each (padding
//!   rows 0) -> write_csr_row(cur_seq_len, b, 1) and (past_kv_cur_seq_len, b,
//!   held_b) for every live row -> infer_rows(rows) with rows[b] = the row's
//!   sequence or k_padding_row. Each live row is validated as a single job is;
//!   "logits" holds B x vocab, row b at [b*vocab, (b+1)*vocab), padding rows 0.
//! At most one job per slot and therefore two per device are in flight (ping
//! running, pong waiting); jobs complete in submission order.
//!
//! Fault model: every call returns a status from config/status.hpp; its fault
//! class tells the caller what to do (retry, fail the request, push back, give up
//! on the model, or reset the device). No call aborts or throws.
//!
//! Threading: calls are made from one owner at a time (the DeviceActor serialises
//! them); completion callbacks arrive on the backend's own timer/worker thread (or
//! the thread driving virtual time) and must only post to the owner.
#include <chrono>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/result.hpp"
#include "device/types.hpp"

namespace calserve::device {

using timeout = std::chrono::nanoseconds;

// The sequence operations of CalRT's KV adapter beyond allocate/apply/free/clear (a C3
// extension, docs/device.md "KV sequence operations"). `copy` and `keep` are what KV
// reuse needs and are implemented; `add`, `div`, `state` and `shift` (position
// arithmetic, state save/restore, context shift) answer `unsupported`.
enum class kv_seq_op : std::uint8_t { copy, keep, add, div, state, shift };
std::string_view to_string(kv_seq_op op);

// Modelled (virtual or real) timestamps of one job, nanoseconds since the device clock's epoch.
struct job_timing {
    std::int64_t submitted_ns = 0;
    std::int64_t h2d_end_ns = 0;
    std::int64_t compute_start_ns = 0;
    std::int64_t compute_end_ns = 0;
    std::int64_t completed_ns = 0;  // end of the output copy (D2H)
};

// A row of a batched job that carries no sequence (costed, never computed or sampled).
inline constexpr seq_id k_padding_row = ~seq_id{0};

struct job_result {
    job_id job = 0;
    std::string submodel;
    calserve::device::slot slot = calserve::device::slot::ping;
    seq_id sequence = 0;         // the first live row
    std::int64_t tokens = 0;     // cur_seq_len of the job (per row)
    std::int64_t kv_length = 0;  // length of `sequence` after the job
    job_timing timing;
    std::vector<seq_id> rows;    // the job's rows as submitted, padding (k_padding_row) included
};

struct configure_report {
    double modelled_ms = 0;  // parameter bytes / host link bandwidth
    std::vector<memory_usage> memory;
};

// Called exactly once per wait_async: the job's result, or wait_timeout.
using completion_callback = std::function<void(result<job_result>)>;

class device {
public:
    virtual ~device() = default;

    // --- device and package (CreateVDevice, Status, CreateCalbin, configure) ---
    virtual const device_info& info() const = 0;
    virtual device_status status() const = 0;
    virtual void_result load(const package_spec& spec) = 0;
    // Reads a package directory's manifest, then load(). Non-virtual convenience.
    void_result load_package(const std::filesystem::path& dir);
    virtual const package_spec& package() const = 0;
    virtual std::vector<std::string> submodel_names() const = 0;
    // Exact name only: a name that is a prefix or substring of another never matches.
    virtual result<submodel_desc> submodel(std::string_view exact_name) const = 0;
    virtual result<configure_report> configure() = 0;
    virtual void_result warmup() = 0;
    virtual void_result reset() = 0;

    // --- buffers of one submodel's slot (InputBuf/OutputBuf, SliceTensor, CSR) ---
    // Real token count of the slot's next job; every input must then hold exactly that many tokens.
    virtual void_result slice(std::string_view submodel, slot s, std::int64_t tokens) = 0;
    virtual void_result write_input(std::string_view submodel, slot s, std::string_view tensor,
                                    std::span<const std::byte> data) = 0;
    // Row 0's register (the only one of a batch-1 submodel).
    virtual void_result write_csr(std::string_view submodel, slot s, std::string_view csr, std::uint32_t value) = 0;
    // Row `row` (< the submodel's batch) of a batched submodel's register (base offset + 4 x row).
    virtual void_result write_csr_row(std::string_view submodel, slot s, std::string_view csr, std::int64_t row,
                                      std::uint32_t value) = 0;
    // Host view of an output after its job completed; valid until the slot's next infer.
    virtual result<std::span<const std::byte>> output(std::string_view submodel, slot s,
                                                      std::string_view tensor) const = 0;
    // D2H into a host buffer: `host` becomes the output's bytes (sized to the output).
    // A device may hand its buffer over instead of copying (`host`'s old storage then
    // becomes the device's); the output is consumed either way: read it once, after
    // the job completed and before the slot's next infer. This one copies.
    virtual void_result read_output(std::string_view submodel, slot s, std::string_view tensor,
                                    std::vector<std::byte>& host);

    // --- jobs (infer, Wait) ---
    // Non-blocking: validates, snapshots the slot's inputs and queues the job.
    // A batch-1 submodel's job for `sequence` (same as infer_rows with one row).
    virtual result<job_id> infer(std::string_view submodel, slot s, seq_id sequence) = 0;
    // rows.size() == the submodel's batch; row b carries sequence rows[b] or k_padding_row;
    // at least one live row; a sequence at most once.
    virtual result<job_id> infer_rows(std::string_view submodel, slot s, std::span<const seq_id> rows) = 0;
    // Blocks the caller (or drives virtual time) until the job completes or `limit` passes.
    virtual result<job_result> wait(job_id job, timeout limit) = 0;
    // Never blocks: `done` is called once, from the backend's timer/worker thread.
    virtual void wait_async(job_id job, timeout limit, completion_callback done) = 0;
    // How long from now `job` is expected to take to complete, by the backend's own
    // account of the work queued ahead of it and its own (zero when it cannot tell, or
    // the job is done). The runtime bounds its wait by a multiple of this, never less
    // than the configured floor (docs/faults.md, "Wait bounds"). An injected slowdown
    // is not part of the expectation: it is what the bound exists to catch.
    virtual timeout expected_completion(job_id job) const = 0;
    // The price of a prefill job not yet submitted: how long the device expects a prefill
    // feeding `tokens` more tokens to a sequence holding `past` to compute (the
    // simulator's latency model; a backend whose jobs the host computes, by its measured
    // rates). The runtime sizes prefill chunks by it (runtime.prefill_chunk_ms). Zero
    // when the backend cannot tell.
    virtual timeout prefill_cost(std::int64_t /*tokens*/, std::int64_t /*past*/) const { return timeout{0}; }
    // The price of a decode step not yet submitted: `rows` rows each holding `past`, each
    // feeding `positions` tokens (1: a plain step; 1 + k: verify rows with k drafts), by
    // the same accounts as prefill_cost. The drafting policy weighs a position by it
    // (docs/speculative.md). Zero when the backend cannot tell.
    virtual timeout decode_cost(std::int64_t /*rows*/, std::int64_t /*positions*/, std::int64_t /*past*/) const {
        return timeout{0};
    }

    // --- KV (allocate, apply, free, clear, canAllocate) ---
    virtual bool kv_can_allocate(std::int64_t tokens) const = 0;
    virtual void_result kv_allocate(seq_id sequence, std::int64_t reserve_tokens) = 0;
    // Grows the sequence's KV to hold `total_tokens`; a stall is bounded by `limit`.
    virtual void_result kv_apply(seq_id sequence, std::int64_t total_tokens, timeout limit) = 0;
    // Refused (invalid_argument) while the sequence is a row of a job in flight.
    virtual void_result kv_free(seq_id sequence) = 0;
    virtual void_result kv_clear() = 0;
    virtual kv_usage kv() const = 0;
    // Seq copy: `dst` (allocated, holding no tokens, not in a job in flight) receives the
    // first `tokens` positions of `src` (a DRAM-to-DRAM copy on every chip, ordered after
    // the jobs already submitted). `src` may be a row of a job in flight: the positions
    // copied are written before it. Capacity for `dst` is applied as kv_apply would.
    virtual void_result kv_copy(seq_id src, seq_id dst, std::int64_t tokens) = 0;
    // Seq keep: `sequence` (not in a job in flight) keeps its first `tokens` positions;
    // the blocks past them go back to the pool.
    virtual void_result kv_keep(seq_id sequence, std::int64_t tokens) = 0;
    // add / div / state / shift: `unsupported`, naming the operation (copy and keep: see above).
    void_result kv_sequence_op_unsupported(kv_seq_op op) const;
    // Tokens the device holds for the sequence, including jobs still in flight (0 if unknown).
    virtual std::int64_t kv_length(seq_id sequence) const = 0;
};

// Scans BF16 logits for NaN/Inf (what a host must do with every output): logits_nan if any.
void_result check_logits_bf16(std::span<const std::byte> logits);

}  // namespace calserve::device
