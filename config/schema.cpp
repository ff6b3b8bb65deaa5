// The one schema of calserve's configuration. Later components add their keys
// here; docs/config.md lists them (and `calserve config --print-defaults`).
#include <algorithm>

#include "config/config.hpp"

namespace calserve {
namespace {
using enum value_type;
constexpr double k_big = 1e15;

constexpr key_spec k_schema[] = {
    {"log.level", string, "info", 0, 0, "trace|debug|info|warn|error|off", "spdlog level"},

    {"server.host", string, "127.0.0.1", 0, 0, "", "HTTP listen address"},
    {"server.port", integer, "8080", 0, 65535, "", "HTTP listen port (0 picks a free port)"},
    {"server.threads", integer, "2", 1, 64, "", "threads running the actors, and as many the network"},
    {"server.api_key", string, "", 0, 0, "", "bearer key required on /v1 routes; empty = open"},
    {"server.max_body_bytes", integer, "1048576", 1024, 1073741824, "", "largest accepted request body"},
    {"server.control_socket", string, "", 0, 0, "", "Unix-domain control socket path; empty = off"},
    {"server.state_dir", string, "", 0, 0, "", "where the alias -> generation mapping persists (models.json); empty = <data home>/state, file models-<port>.json, off when server.port is 0"},
    {"server.drain_timeout_ms", integer, "30000", 0, 3600000, "", "time in-flight requests get on SIGTERM"},
    {"server.ws_write_queue", integer, "256", 1, 65536, "", "events buffered per WebSocket before the slowest stream is cancelled"},
    {"server.ws_write_queue_bytes", integer, "1048576", 4096, 1073741824, "", "bytes queued per WebSocket (replies, tokens, finishes not yet written); when full its reader pauses and tokens overflow"},
    {"server.max_connections", integer, "0", 0, 1048576, "", "connections served at once; beyond it 16 more get one answer (/health, /ready, else 503 + Retry-After); 0 = the open-file limit minus max(64, a quarter) and 16"},
    {"server.header_timeout_ms", integer, "5000", 1, 3600000, "", "time to receive a request line and headers (a new connection: from accept)"},
    {"server.linger_ms", integer, "5000", 0, 600000, "", "lingering close after refusing an unread body (413, 400, 431, 503): how long input is read and dropped"},
    {"server.linger_bytes", integer, "67108864", 0, 1073741824, "", "lingering close: most input bytes read and dropped"},
    {"server.timing_log", string, "", 0, 0, "", "per-request JSONL timing log path; empty = off"},
    {"server.malloc_arenas", integer, "1", 0, 64, "", "glibc malloc arenas (M_ARENA_MAX) set at start-up; 0 = glibc's default (8 per core)"},
    {"server.malloc_trim_s", integer, "10", 0, 86400, "", "return freed heap pages to the system every N seconds (malloc_trim); 0 = never"},
    {"server.tokenize_threads", integer, "2", 1, 64, "", "threads that tokenize prompts and render chat templates, off the network threads"},
    {"server.tokenize_queue", integer, "64", 1, 65536, "", "prompts waiting for a tokenize thread before 429 (overloaded, Retry-After)"},
    {"server.console", string, "auto", 0, 0, "auto|true|false", "web console at / and GET /v1/console/state (docs/console.md); auto = on when server.host is a loopback address"},
    {"server.allowed_origins", string, "", 0, 0, "", "browser origins (scheme://host[:port], comma-separated; * = any) allowed to call the API besides the daemon's own; others get 403 (docs/api.md, Browsers and origins)"},
    {"server.trace", string, "", 0, 0, "", "record inputs and actor messages to this JSONL trace from start-up (implies runtime.recordable); empty = off"},

    {"runtime.max_inflight", integer, "2", 1, 2, "", "device jobs in flight per session (ping/pong)"},
    {"runtime.max_running", integer, "64", 1, 4096, "", "requests admitted to the scheduler at once"},
    {"runtime.max_queued", integer, "256", 0, 65536, "", "requests waiting for admission before 429"},
    {"runtime.slot_context", integer, "40960", 1, 1048576, "", "configured per-slot context (tokens)"},
    {"runtime.prefill_budget", integer, "1", 1, 64, "", "prefills allowed between decode rounds"},
    {"runtime.admit_window_us", integer, "2000", 0, 1000000, "", "admission window: after a sequence leaves, the next decode step waits up to this long for a prompt to take its place, which is then prefilled first (0 = never waits)"},
    {"runtime.request_timeout_ms", integer, "600000", 1, 86400000, "", "default request deadline"},
    {"runtime.kv_wait_ms", integer, "5000", 0, 3600000, "", "longest wait for KV room before 429"},
    {"runtime.progress_timeout_ms", integer, "30000", 0, 86400000, "", "watchdog: /health unhealthy when admitted work makes no token progress this long; 0 = off"},
    {"runtime.recordable", boolean, "false", 0, 0, "", "run the actors on one real-time-driven deterministic thread so traces replay exactly (control socket trace.start)"},
    {"runtime.max_job_retries", integer, "2", 0, 100, "", "a request whose device jobs fail this many times in a row and once more fails alone (job_retries_exhausted); the device's other sequences recover"},
    {"runtime.max_batch", integer, "0", 0, 256, "", "most sequences in one decode job; 0 = the largest decode batch profile of the package"},
    {"runtime.decode_groups", integer, "1", 1, 2, "", "decode batches in flight: 1 = every decoding sequence in one batch (prefills use the other slot), 2 = two groups alternating on ping/pong"},
    {"runtime.kv_policy", string, "on_demand", 0, 0, "on_demand|reserve", "KV budgeting: on_demand reserves prompt + runtime.kv_step_tokens and grows (preempting by recompute when full); reserve holds prompt + max_tokens from admission"},
    {"device.cpu_arithmetic", string, "bf16", 0, 0, "fp32|bf16", "arithmetic of the cpu backend's transformer (serve --model): bf16 = BF16 dot products accumulated in FP32 (the CPU's AVX512_BF16 instructions; elsewhere a portable form with the same bits, slower), fp32 = exact FP32 products; packages on the simulator compute in fp32"},
    {"device.cpu_sampling_head", integer, "-1", -1, 4096, "", "top-k of a sampling head at the end of the cpu backend's decode programs (serve --model): 0 = none (logits to the host), K = a top-K head, -1 = a top-64 head when runtime.speculative.method is not none (drafts are verified by the head), else none"},
    {"runtime.prefill_chunk", integer, "512", 0, 1048576, "", "most prompt tokens one prefill job feeds while another sequence decodes or waits, where runtime.prefill_chunk_ms is 0 or the device cannot price a prefill; longer prompts are then prefilled in chunks that interleave with decode batches, so running streams keep streaming; a prompt alone is prefilled whole (0 = whole prompts always, whatever runtime.prefill_chunk_ms)"},
    {"runtime.prefill_chunk_ms", number, "150", 0, 600000, "", "while another sequence decodes or waits, a prompt is prefilled in chunks of the most tokens the device prices within this time (the latency model; the cpu backend by its measured rates), so the other streams wait about this plus one decode step at most (0 = chunks of runtime.prefill_chunk tokens)"},
    {"runtime.chain_tokens", boolean, "true", 0, 0, "", "token chaining: a decode step takes its input tokens from the previous step's draw on the device, so the next step is submitted before this one is read (stops, deadlines and cancellation seen one step behind); needs device.sampling_head and a package with a sampling head (without one, steps are not chained)"},
    {"runtime.prefix_cache", boolean, "true", 0, 0, "", "keep finished sequences' KV on the device and reuse it for prompts that start with the same tokens (evicted least recently used when KV is needed)"},
    {"runtime.prefix_cache_block", integer, "64", 16, 65536, "", "prefix cache granularity: prompts reuse cached KV in whole blocks of this many tokens"},
    {"runtime.kv_step_tokens", integer, "64", 1, 1048576, "", "on_demand: tokens of decode room reserved beyond the prompt, and the growth step"},
    {"runtime.sampler_threads", integer, "2", 1, 64, "", "threads sampling the rows of one decode batch (the Sampler actor included)"},
    {"runtime.kv_blocks", integer, "0", 0, k_big, "", "cap on KV blocks the scheduler uses; 0 = all the package holds"},
    {"runtime.default_max_tokens", integer, "256", 1, 1048576, "", "max_tokens when a request gives none"},
    {"runtime.speculative.method", string, "none", 0, 0, "none|ngram", "speculative decoding: none, or ngram = drafts from n-gram lookup in the sequence's own tokens, verified in one device job with the same tokens as plain decoding; only rows the device's sampling head draws draft (no penalties, logit bias, grammar or logprobs); needs device.sampling_head and a package with a sampling head (docs/speculative.md)"},
    {"runtime.speculative.draft_tokens", integer, "4", 1, 7, "", "most tokens drafted for one verify (the device's verify width allows 7)"},
    {"runtime.speculative.ngram_min", integer, "1", 1, 64, "", "shortest suffix n-gram looked up"},
    {"runtime.speculative.ngram_max", integer, "3", 1, 64, "", "longest suffix n-gram looked up (tried first; at least ngram_min)"},
    {"runtime.speculative.max_batch", integer, "4", 1, 256, "", "a step with more live rows than this drafts nothing (big batches are compute-bound)"},

    {"device.wait_timeout_ms", integer, "10000", 1, 3600000, "", "floor of a job's device Wait() bound (docs/faults.md, \"Wait bounds\")"},
    {"device.wait_cost_factor", number, "4", 1, 1000, "", "a job's Wait() bound is max(wait_timeout_ms, this x the device's expected completion of it)"},
    {"device.reset_limit", integer, "3", 0, 100, "", "consecutive failed resets before Dead"},
    {"device.reset_backoff_ms", integer, "50", 0, 600000, "", "wait before the 2nd reset attempt of a recovery, doubling per further attempt (jittered, seeded by device.sim.seed); 0 = none"},
    {"device.reset_backoff_max_ms", integer, "5000", 0, 3600000, "", "cap on the wait between reset attempts"},
    {"device.sampling_head", boolean, "true", 0, 0, "", "rows that need only their logits (no penalties, bias, logprobs or grammar) are drawn by the decode programs' sampling head when the package has one; the output copy then carries a token id per row instead of its logits"},
    {"device.dead_exit", boolean, "false", 0, 0, "", "exit the daemon (code 3) when the device goes dead, for a supervisor to restart it; false = keep running, answer 503, accept `ctl device reset`"},
    {"device.sim.step_ms", number, "-1", -1, 1e6, "", "fixed compute time per infer; -1 = latency model"},
    {"device.sim.d2h_ms", number, "-1", -1, 1e6, "", "fixed output copy time per job; -1 = latency model"},
    {"device.sim.dram_bytes_per_chip", integer, "17179869184", 1, k_big, "", "DRAM per chip (assumption: 32 GiB board / 2)"},
    {"device.sim.sram_bytes_per_chip", integer, "67108864", 0, k_big, "", "SRAM per chip (assumption)"},
    {"device.plan.guard_bytes", integer, "268435456", 0, k_big, "", "allocator guard per chip kept free by the capacity planner (assumption)"},
    {"device.sim.dram_gbps", number, "200", 0.001, 1e6, "", "DRAM read bandwidth per chip, GB/s (assumption)"},
    {"device.sim.pcie_gbps", number, "16", 0.001, 1e6, "", "host link bandwidth, GB/s (assumption)"},
    {"device.sim.d2d_gbps", number, "32", 0.001, 1e6, "", "chip-to-chip bandwidth, GB/s (assumption)"},
    {"device.sim.peak_tflops", number, "64", 0.001, 1e6, "", "peak BF16 TFLOP/s per chip (assumption)"},
    {"device.sim.sync_us", number, "5", 0, 1e6, "", "cost of one cross-chip sync, microseconds (assumption)"},
    {"device.sim.launch_us", number, "20", 0, 1e6, "", "fixed launch cost per infer, microseconds (assumption)"},
    {"device.sim.seed", integer, "1", 0, k_big, "", "seed of the simulator's fault probabilities"},
    {"device.sim.chips", integer, "2", 1, 16, "", "chips on the simulated board (the documented board has 2)"},
    {"device.sim.calcores_per_chip", integer, "2", 1, 64, "", "CalCores per simulated chip"},
    {"device.sim.model_threads", integer, "2", 1, 256, "", "threads of the reference model computing the simulator's numbers"},
    {"device.sim.cost_experts", string, "routed", 0, 0, "routed|all", "MoE weights a step reads and computes: routed = the experts its tokens are routed to (expected 1 - (1 - k/E)^T); all = every expert, as a dense model of the same bytes (capacity-planning what-if)"},
    {"device.sim.cost_package", string, "", 0, 0, "", "package directory whose figures (parameters, KV, shape) drive the latency model instead of the served package's; empty = the served package"},
    {"device.sim.placement", string, "package", 0, 0, "package|tp|ep|pp", "how the latency model lays the model over the package's chips: package = the manifest's placement (tp when it names none), tp = every layer split, ep = experts partitioned with all-to-all dispatch and combine, pp = layers split into stages (docs/twin.md, Placements); costs only, tokens unchanged"},
    {"device.sim.routing_skew", number, "0", 0, 8, "", "ep: Zipf exponent of expert popularity over the expert index, 0 = uniform routing (assumption)"},
    {"device.sim.all_to_all_us", number, "10", 0, 1e6, "", "ep: latency of one dispatch or combine all-to-all, microseconds (assumption)"},
    {"device.sim.micro_batches", integer, "0", 0, 64, "", "pp: micro-batches a step is cut into; 0 = min(rows, chips)"},
    {"device.sim.kv_block_tokens", integer, "256", 1, 1048576, "", "KV allocation granularity of the simulator, tokens"},
    {"models.grave_period_ms", integer, "10000", 0, 3600000, "", "how long a shut-down generation's engine (retired, or a failed candidate) is kept before it is destroyed, so that no device event of it is still pending: virtual time on a recordable daemon (docs/generations.md)"},
    {"models.*.chips", string, "", 0, 0, "", "board chips of model NAME, e.g. \"1\" or \"0,1\"; absent = first fit (docs/generations.md)"},
};
}  // namespace

std::span<const key_spec> config_schema() { return k_schema; }

bool key_matches(std::string_view pattern, std::string_view path) {
    while (true) {
        const auto pd = pattern.find('.'), qd = path.find('.');
        const auto ps = pattern.substr(0, pd), qs = path.substr(0, qd);
        if (qs.empty() || (ps != "*" && ps != qs)) return false;
        if (pd == std::string_view::npos || qd == std::string_view::npos) return pd == qd;
        pattern.remove_prefix(pd + 1);
        path.remove_prefix(qd + 1);
    }
}

bool is_pattern(const key_spec& k) { return k.path.find('*') != std::string_view::npos; }

const key_spec* find_key(std::string_view path) {
    auto it = std::find_if(std::begin(k_schema), std::end(k_schema),
                           [&](const key_spec& k) { return key_matches(k.path, path); });
    return it == std::end(k_schema) ? nullptr : &*it;
}

}  // namespace calserve
