#pragma once
//! Scheduling policy as pure functions (STYLE 6): the BatchTick and the engine
//! apply them; tests table-drive them without any actor.
//!
//! plan_next_job: what runs in the slot that just freed — one prefill (the
//! prefill program is batch 1) or a decode batch of up to `max_batch` rows.
//!   - One group (`decode_groups` 1, the default): every decoding sequence is in
//!     one batch (up to `max_batch`); a batch waits while any decoder is still in
//!     a decode job or awaiting its answer. A sequence whose prefill is in flight
//!     does not hold it: it joins at the first boundary after its prefill, so the
//!     device goes from the prefill straight to the batch the host built
//!     meanwhile. The other slot carries prefills.
//!   - Two groups (`decode_groups` 2): with two slots and two or more decoding sequences, they form
//!     two disjoint groups, one per slot, each at most ceil(D / 2) and
//!     `max_batch`: a sequence remembers the slot it last decoded in (`group`),
//!     and a slot's batch takes its own group plus unassigned sequences (new, or
//!     cut from an oversized group) while the other slot is busy. While the
//!     device computes one group the host samples the other and builds its next
//!     batch, so host time hides behind device time (docs/decisions.md has the
//!     measurement against one group).
//!   - Token chaining (`runtime.chain_tokens`): a `chainable` row (in the other
//!     slot's decode job, drawn on the device) is a candidate like a ready one, so
//!     with one group the batch's next step is formed while its current step is
//!     still in flight and the two slots alternate the same batch.
//!   - Step boundary: a batch waits while one of its would-be rows still awaits
//!     its Request's answer (continue or finish, one message away), so batches
//!     do not fragment into batches of one.
//!   - Prefill vs decode: a waiting prefill (FCFS by arrival) is taken when no
//!     decode can go, or when every decode group advanced once since the last
//!     prefill, up to `prefill_budget` prefills in a row; a prefill that has
//!     waited `ageing` or more goes before any decode. Decodes never starve:
//!     after `prefill_budget` prefills the decode batch goes first (waiting, if
//!     need be, for its step boundary).
//!   - Admission window (`admit_window`, runtime.admit_window_us): after a sequence
//!     leaves, no decode forms for up to the window, so a prompt sent as a stream
//!     ends (a closed-loop client, a queue at the door) is prefilled before the
//!     next decode step instead of behind it (docs/twin.md section 7).
//! Admission: `plan_door` at the engine's front door (`submit`: device dead,
//!   draining, context, `max_running + max_queued` in flight), `plan_start` in the
//!   BatchTick at `bt_admit` and whenever a sequence leaves (`max_running`
//!   admitted, the rest wait FCFS). `fits_context` is the one context rule.
//! Per sequence: `needs_prefill` (its next job a prefill, or the next chunk of
//!   one) and `chainable` (token chaining) read what the BatchTick knows of it.
//! pick_profile: the decode program a batch runs in (DeviceActor), and the
//!   largest one `runtime.max_batch` allows (engine).
//! KV sizing (`runtime.kv_policy`): `reserve` holds prompt + max_tokens from
//!   admission; `on_demand` holds the tokens so far plus `kv_step_tokens` and
//!   grows by the same step before a job would pass the reservation. Both
//!   block-rounded, never past prompt + max_tokens.
//! Preemption: candidates hold KV, are in no job, have no KV request out and
//!   are not ending; the victim is the most recently admitted candidate.
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "config/status.hpp"

namespace calserve::actors {

using std::chrono::nanoseconds;

inline constexpr int k_no_group = -1;

struct seq_view {
    std::uint64_t seq = 0;
    bool needs_prefill = false;   // admitted, prompt (again, after a reset or preemption) not on the device
    bool ready = false;           // not in flight, not awaiting, has KV for its next job
    nanoseconds arrived{0};
    nanoseconds last_served{0};
    int group = k_no_group;       // decode group: the slot it last decoded in
    bool awaiting = false;        // its last token is with the Request (answer pending)
    bool in_job = false;          // a job (prefill or decode) holds it
    bool in_prefill = false;      // that job is its prefill: it joins the batch after next, never holds one
    // In the other slot's decode job, drawn by the device's sampling head, with room for one
    // more step: the next step may take its token from that job's draw on the device
    // (token chaining), so it is a candidate like a ready row and holds no batch back.
    bool chainable = false;
};

struct tick_state {
    int prefills_in_a_row = 0;
    int decodes_since_prefill = 0;
    // When a sequence last left the table (finished, cancelled, failed) with no job formed
    // since: the admission window (`admit_window`) runs from here.
    std::optional<nanoseconds> left_at;
};

struct schedule_params {
    int prefill_budget = 1;
    nanoseconds ageing = std::chrono::seconds(2);
    int max_batch = 1;            // rows of the largest decode job
    int slots = 2;                // jobs in flight (ping/pong = 2)
    int decode_groups = 1;        // 1: all decoders in one batch; 2: two groups alternating on the slots
    // Admission window (runtime.admit_window_us): after a sequence leaves, the next decode
    // waits up to this long for a prompt to take its place (0 = never waits).
    nanoseconds admit_window{0};
};

// Where the plan is for: the slot that freed and whether the other one carries a job.
struct slot_view {
    int slot = 0;
    bool other_busy = false;
};

struct job_choice {
    bool prefill = false;
    std::vector<std::uint64_t> rows;  // prefill: one sequence; decode: 1..max_batch, in row order
    friend bool operator==(const job_choice&, const job_choice&) = default;
};

std::optional<job_choice> plan_next_job(std::span<const seq_view> seqs, const tick_state& state,
                                        const schedule_params& params, nanoseconds now, slot_view where = {});
// Updates the counters after `choice` was scheduled (a job formed closes the admission window).
tick_state after_job(tick_state state, const job_choice& choice);
// The admission window: while it is open (a sequence left less than `admit_window` ago and
// no job formed since) no decode is formed, so a prompt sent the moment a stream ended (a
// closed-loop client, a queue at the door) is prefilled before the next decode step
// instead of behind it. The time it closes, or nullopt when it is not open at `now`.
std::optional<nanoseconds> admit_window_until(const tick_state& state, const schedule_params& params, nanoseconds now);
// When the window holds a job that would form without it (plan_next_job then waits):
// its end, when the BatchTick plans again; nullopt when it holds nothing (no timer).
std::optional<nanoseconds> window_holds_until(std::span<const seq_view> seqs, const tick_state& state,
                                              const schedule_params& params, nanoseconds now, slot_view where = {});
// Largest group a slot takes when `decoders` sequences are decoding.
int group_cap(int decoders, const schedule_params& params);
// The smallest profile holding `rows` (profiles ascending): its index; nullopt when none does.
std::optional<std::size_t> pick_profile(std::span<const std::int64_t> profiles, std::int64_t rows);

// Admission at the engine's door: every refusal a request can get before it is queued.
struct door_input {
    std::int64_t in_flight = 0;      // requests admitted at the door and not yet ended
    std::int64_t max_in_flight = 0;  // runtime.max_running + runtime.max_queued
    bool fits_context = true;        // fits_context(prompt, max_tokens, usable context)
    bool accepting = true;           // not draining
    bool device_dead = false;        // the device is dead (checked first)
};
// Admission to the BatchTick's table: `max_running` sequences hold (or wait for) KV, the
// rest wait in arrival order (their number is bounded by the door).
struct start_input {
    std::int64_t running = 0;        // admitted sequences (KV requested or held)
    std::int64_t ahead = 0;          // waiting for admission ahead of this one
    std::int64_t max_running = 0;
    bool device_dead = false;
};

enum class admission : std::uint8_t { admit, queue, reject };
struct admission_decision {
    admission verdict = admission::reject;
    status reason = status::ok;
    friend bool operator==(const admission_decision&, const admission_decision&) = default;
};

// Reject (device_dead, not_ready, context_overflow, queue_full, in that order) or admit.
admission_decision plan_door(const door_input& in);
// Reject (device_dead), admit (room and nobody ahead: FCFS), or queue.
admission_decision plan_start(const start_input& in);

// The one context-fit rule (the engine's door, the HTTP parameters, the KvManager): a
// sequence of `prompt` tokens that may generate `max_tokens` more fits `context` tokens
// (the usable context, or the KV pool's whole capacity) when their sum does. A prompt
// alone is checked with max_tokens 1: it must leave room for one generated token.
bool fits_context(std::int64_t prompt, std::int64_t max_tokens, std::int64_t context);

// Token chaining (runtime.chain_tokens): one more decode step may take a row's input
// token from the device's draw of the decode job it is in.
struct chain_input {
    bool enabled = false;             // runtime.chain_tokens
    bool in_one_decode_job = false;   // exactly one job holds it, a decode, no chained step refused
    bool device_holds_kv = false;     // that job runs over KV the device keeps
    bool device_draws = false;        // unconstrained, with parameters the sampling head draws
    std::int64_t tokens_after = 0;    // its tokens once every job holding it has drawn
    std::int64_t kv_tokens = 0;       // its KV reservation
    std::int64_t prompt_len = 0;
    std::int64_t max_tokens = 0;
};
// In one decode job drawn on the device, with room for the step (reservation, max_tokens).
bool chainable(const chain_input& in);

// Whether a sequence's next job is a prefill: while a job holds it, whether that job is
// one; otherwise when the device holds none of its KV, or less than all but its last
// token (the next chunk of a long prompt, runtime.prefill_chunk).
struct prefill_input {
    bool in_job = false;
    bool job_is_prefill = false;
    bool device_holds_kv = false;
    std::int64_t pending_tokens = 0;  // tokens the device does not hold yet
};
bool needs_prefill(const prefill_input& in);

// KV budgeting per sequence (runtime.kv_policy; the configuration's default is on_demand).
enum class kv_policy : std::uint8_t { on_demand, reserve };

struct kv_sizing {
    kv_policy policy = kv_policy::on_demand;
    std::int64_t step_tokens = 64;       // on_demand: room beyond the tokens so far, and the growth step
    std::int64_t block_tokens = 256;     // reservations are whole blocks
};

// Tokens to reserve when a sequence holding `tokens` (prompt + generated so far) is
// admitted, or re-admitted after a preemption: all of `full_tokens` under reserve.
std::int64_t kv_reserve_tokens(const kv_sizing& kv, std::int64_t tokens, std::int64_t full_tokens);
// on_demand: what the reservation grows to when the next job would pass it.
std::int64_t kv_grow_tokens(const kv_sizing& kv, std::int64_t tokens, std::int64_t full_tokens);
// The next job would feed `tokens` past a reservation of `kv_tokens`.
bool kv_needs_grow(std::int64_t tokens, std::int64_t kv_tokens);

// Chunked prefill only where it buys something (docs/twin.md section 6): a chunk
// re-reads the weights, so a prompt with no other sequence beside it (none decoding,
// none waiting) is fed whole. Beside others the chunk is Sarathi-Serve's token budget,
// priced: the most tokens whose prefill the device prices within `target`
// (runtime.prefill_chunk_ms, the time the others' streams wait for one chunk; their gap
// is then at most about the target plus one decode step), never fewer than
// k_prefill_chunk_min; a prompt whose rest fits the target goes whole. Where the
// device cannot price (`price` 0) or the target is 0: `tokens` (runtime.prefill_chunk).
// `tokens` 0 = whole prompts always (both keys off).
struct chunk_budget {
    std::int64_t tokens = 0;   // runtime.prefill_chunk
    nanoseconds target{0};     // runtime.prefill_chunk_ms
};
inline constexpr std::int64_t k_prefill_chunk_min = 64;
// `price(t)`: the device's expected time of a prefill job feeding the next `t` of the
// `pending` tokens (non-decreasing in t; 0 = cannot tell). Returns the most tokens the
// next prefill job feeds (the job codec's chunk limit), 0 = the whole rest.
std::int64_t prefill_chunk_limit(const chunk_budget& budget, bool others_active, std::int64_t pending,
                                 const std::function<nanoseconds(std::int64_t)>& price);

// Preemption by recompute: the victim when a running sequence cannot extend its
// KV — the most recently admitted candidate (it may be the one that asked, whose
// grow was refused). A candidate holds KV, is in no job (its KV is not in use),
// has no KV request out and is not ending (its KV goes back anyway).
struct victim_view {
    std::uint64_t seq = 0;
    std::uint64_t admitted = 0;   // admission order: larger = more recent
    bool holds_kv = true;         // granted (not waiting for KV)
    bool in_job = false;          // a job holds it
    bool kv_request_out = false;  // a kv_grow is out for it
    bool ending = false;          // its Request reached a terminal state
};
bool preemptible(const victim_view& v);
std::optional<std::uint64_t> plan_victim(std::span<const victim_view> sequences);

}  // namespace calserve::actors
