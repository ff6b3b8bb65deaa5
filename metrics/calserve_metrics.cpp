// The daemon's metric families (names, help, buckets, label values) in one place.
// docs/metrics.md documents each of them; keep the two in step.
#include "device/fault_points.hpp"
#include "metrics/metrics.hpp"
#include "metrics/process_metrics.hpp"

namespace calserve::metrics {

std::string_view to_string(phase p) {
    static constexpr std::string_view names[phase_count] = {"tokenize", "queue",   "h2d",    "infer",
                                                            "d2h",      "convert", "sample", "flush"};
    return names[static_cast<std::size_t>(p)];
}

std::string_view to_string(outcome o) {
    static constexpr std::string_view names[outcome_count] = {"stop",    "length", "cancelled",
                                                              "timeout", "error",  "rejected"};
    return names[static_cast<std::size_t>(o)];
}

namespace {
// 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64: every profile size and the gaps between them.
std::span<const double> batch_buckets() {
    static constexpr double bounds[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64};
    return bounds;
}

histogram& hist(registry& r, const char* name, const char* help, std::span<const double> bounds) {
    return r.add_histogram(name, help, bounds).get();
}

std::array<histogram*, phase_count> make_phases(registry& r) {
    auto f = r.add_histogram("calserve_phase_seconds",
                             "Time spent per phase of a request or decode step, seconds.", fast_buckets(), {"phase"});
    std::array<histogram*, phase_count> out{};
    for (std::size_t i = 0; i < phase_count; ++i) out[i] = &f.labels({to_string(static_cast<phase>(i))});
    return out;
}

std::array<counter*, outcome_count> make_outcomes(registry& r) {
    auto f = r.add_counter("calserve_requests_total", "API requests by how they ended.", {"outcome"});
    std::array<counter*, outcome_count> out{};
    for (std::size_t i = 0; i < outcome_count; ++i) out[i] = &f.labels({to_string(static_cast<outcome>(i))});
    return out;
}

family<counter> make_faults(registry& r) {
    auto f = r.add_counter("calserve_faults_total", "Device and runtime faults that fired, by fault point.",
                           {"point"});
    // Every fault point of device/fault_points.hpp's table, pre-created so rate() sees
    // a zero before the first fire.
    for (auto p : device::all_fault_points) f.labels({device::to_string(p)});
    return f;
}

family<counter> make_failed(registry& r) {
    auto f = r.add_counter("calserve_requests_failed_total", "Requests that ended in an error, by fault class.",
                           {"class"});
    for (auto c : failure_classes) f.labels({to_string(c)});
    return f;
}
}  // namespace

calserve_metrics::calserve_metrics(registry& r)
    : families(r),
      time_to_first_token(hist(r, "calserve_time_to_first_token_seconds",
                               "Time from request received to first token written to the client, seconds.",
                               latency_buckets())),
      inter_token_latency(hist(r, "calserve_inter_token_latency_seconds",
                               "Time between two consecutive token writes of one stream, seconds.",
                               latency_buckets())),
      e2e_request_latency(hist(r, "calserve_e2e_request_latency_seconds",
                               "Time from request received to the last byte of the response, seconds.",
                               latency_buckets())),
      request_queue_time(hist(r, "calserve_request_queue_time_seconds",
                              "Time a request waited before its prefill started, seconds.", latency_buckets())),
      phases(make_phases(r)),
      requests_running(r.add_gauge("calserve_requests_running", "Requests admitted and generating.").get()),
      requests_waiting(r.add_gauge("calserve_requests_waiting", "Requests queued for admission.").get()),
      requests_waiting_limit(r.add_gauge("calserve_requests_waiting_limit",
                                         "Requests that may queue for admission (runtime.max_queued).")
                                 .get()),
      kv_wait_limit_seconds(r.add_gauge("calserve_kv_wait_limit_seconds",
                                        "Longest wait for KV room before a request fails (runtime.kv_wait_ms), seconds.")
                                .get()),
      kv_blocks_used(r.add_gauge("calserve_kv_blocks_used", "KV cache blocks in use.").get()),
      kv_blocks_capacity(r.add_gauge("calserve_kv_blocks_capacity", "KV cache blocks of the session (used + free).").get()),
      device_state(r.add_gauge("calserve_device_state",
                               "DeviceActor state: 0 unconfigured, 1 configuring, 2 ready, 3 busy, 4 faulted, "
                               "5 resetting, 6 warmup, 7 dead.")
                       .get()),
      device_busy_seconds(r.add_counter("calserve_device_busy_seconds_total",
                                        "Seconds the device spent computing jobs.")
                              .get()),
      inflight_slots(r.add_gauge("calserve_inflight_slots", "Device jobs in flight (ping/pong slots busy).").get()),
      outcomes(make_outcomes(r)),
      faults_total(make_faults(r)),
      device_resets(r.add_counter("calserve_device_resets_total", "Device resets performed.").get()),
      recovery_seconds(hist(r, "calserve_recovery_seconds",
                            "Time from a device fault to the next token streamed, seconds.", latency_buckets())),
      requests_recovered(r.add_counter("calserve_requests_recovered_total",
                                       "In-flight requests re-prefilled after a device fault that then continued.")
                             .get()),
      request_retries_exhausted(r.add_counter("calserve_request_retries_exhausted_total",
                                              "Requests failed alone because their device jobs failed "
                                              "runtime.max_job_retries + 1 times in a row.")
                                    .get()),
      requests_failed_total(make_failed(r)),
      batch_size(hist(r, "calserve_batch_size", "Live rows (sequences) per decode job.", batch_buckets())),
      batch_padding_rows(r.add_counter("calserve_batch_padding_rows_total",
                                       "Decode rows computed only to pad a job to its batch profile.")
                             .get()),
      preemptions_total(r.add_counter("calserve_preemptions_total",
                                      "Running sequences preempted (KV given up, re-prefilled later) for KV room.")
                            .get()),
      scheduler_stalls(r.add_counter("calserve_scheduler_stalls_total",
                                     "Times the BatchTick went idle with a runnable row, a free slot, a ready device and "
                                     "nothing to wake it (a scheduling bug; the error log names the state).")
                           .get()),
      device_drawn_rows(r.add_counter("calserve_device_drawn_rows_total",
                                      "Decode rows whose token the device's sampling head drew (no logits copied).")
                            .get()),
      device_topk_rows(r.add_counter("calserve_device_topk_rows_total",
                                     "Decode rows sampled on the host from the sampling head's top k and log-sum-exp "
                                     "(no logits copied).")
                           .get()),
      chained_steps(r.add_counter("calserve_chained_steps_total",
                                  "Decode jobs submitted before the job whose draws they take as input was read.")
                        .get()),
      d2h_bytes(r.add_counter("calserve_d2h_bytes_total",
                              "Output bytes copied device to host: per live row its logits, or what the sampling head returns.")
                    .get()),
      spec_verify_rows(r.add_counter("calserve_spec_verify_rows_total",
                                     "Decode rows that carried drafted tokens for the device to verify (speculative decoding).")
                           .get()),
      spec_drafted_tokens(r.add_counter("calserve_spec_drafted_tokens_total", "Drafted tokens sent to the device in verify rows.")
                              .get()),
      spec_accepted_tokens(r.add_counter("calserve_spec_accepted_tokens_total",
                                         "Drafted tokens the device's draws agreed with (kept; each one a token without a step).")
                               .get()),
      spec_acceptance_rate(r.add_gauge("calserve_spec_acceptance_rate",
                                       "Accepted / drafted tokens since start (0 before any draft).")
                               .get()),
      prefix_cache_queries(r.add_counter("calserve_prefix_cache_queries_tokens_total",
                                         "Prompt tokens looked up in the prefix cache.")
                               .get()),
      prefix_cache_hits(r.add_counter("calserve_prefix_cache_hits_tokens_total",
                                      "Prompt tokens whose KV came from the prefix cache (not prefilled).")
                            .get()),
      prefix_cache_blocks(r.add_gauge("calserve_prefix_cache_blocks",
                                      "KV blocks held by cached sequences (evicted when KV is needed).")
                              .get()),
      prefix_cache_evictions(r.add_counter("calserve_prefix_cache_evictions_total",
                                           "Cached sequences evicted for KV room, replaced, or dropped at a reset.")
                                 .get()),
      prompt_tokens_total(r.add_counter("calserve_prompt_tokens_total", "Prompt tokens of admitted requests.").get()),
      generation_tokens_total(
          r.add_counter("calserve_generation_tokens_total", "Tokens generated and streamed to clients.").get()),
      tokenize_jobs(r.add_counter("calserve_tokenize_jobs_total",
                                  "Prompts tokenized (chat template + tokenizer) on the tokenize pool's threads.")
                        .get()),
      tokenize_bytes(r.add_counter("calserve_tokenize_bytes_total", "Prompt text bytes handed to the tokenizer.").get()),
      tokenize_refused(r.add_counter("calserve_tokenize_refused_total",
                                           "Prompts refused by their byte length alone, without tokenizing.")
                                 .get()),
      tokenize_queue(r.add_gauge("calserve_tokenize_queue", "Prompts waiting for or running on the tokenize pool.")
                         .get()),
      model_requests_total(r.add_counter("calserve_model_requests_total", "Requests routed to a model.", {"model"})),
      model_generation(r.add_gauge("calserve_model_generation", "The model's serving generation number.", {"model"})),
      model_in_flight(r.add_gauge("calserve_model_in_flight", "Requests in flight on the model, all generations.",
                                  {"model"})),
      model_switches_total(r.add_counter("calserve_model_switches_total",
                                         "Switches of the model's alias to another generation (load, rollback).",
                                         {"model"})),
      model_load_failures_total(r.add_counter("calserve_model_load_failures_total",
                                              "Generation loads refused or failed at a step.", {"model"})) {
    install_process_metrics(r);  // process_* from /proc/self, refreshed per scrape
}

double device_state_code(std::string_view state_name) {
    const auto s = device::parse_device_health(state_name);
    return s ? device::health_code(*s) : -1;
}

}  // namespace calserve::metrics
