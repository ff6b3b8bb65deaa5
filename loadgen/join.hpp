#pragma once
//! Three clocks for `calserve bench --server-log`: the client's records joined by
//! request id to the server's per-request timing log (net/timing_log.hpp), and
//! the summary that sets client, server and device times side by side (pure
//! functions over records).
//!
//! Fault model: the log is another program's file. A malformed line is counted
//! and skipped; a client record whose id is not in the log stays unjoined and is
//! counted (never dropped silently); a record without an id (it failed before the
//! response headers) is counted apart. Invariant: joined + unjoined + no_id equals
//! the number of records given to the join.
#include <boost/json/object.hpp>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "loadgen/client.hpp"
#include "loadgen/stats.hpp"

namespace calserve::loadgen {

struct timing_index {
    std::unordered_map<std::string, server_timing> by_id;
    std::size_t lines = 0;      // non-empty lines read
    std::size_t malformed = 0;  // not JSON objects with a string "id"
};

// Parses JSONL timing-log text (a later line with the same id wins).
timing_index parse_timing_log(std::string_view text);

struct join_stats {
    std::size_t joined = 0;
    std::size_t unjoined = 0;  // had a request id the log does not contain
    std::size_t no_id = 0;     // the client never learned the request id
};

// Sets `join_tried` and `joined` on every record; counts the outcomes.
join_stats join_timing(std::span<request_record> records, const timing_index& log);

struct clocks_summary {
    join_stats join;                  // over the measured records
    bool has_device = false;          // some joined line carried the device clock
    metric_summary client_ttft_ms, edge_ttft_ms, engine_ttft_ms, device_first_ms;
    metric_summary client_e2e_ms, edge_e2e_ms, engine_e2e_ms, device_ms;
    metric_summary overhead_ms;       // client e2e - engine e2e: network, HTTP and streaming
    metric_summary host_step_ms;      // (engine e2e - device) / device steps
    metric_summary device_step_ms;    // device / device steps
    metric_summary job_wall_step_ms;  // device_wall / device steps: a job as the host waits for it
    metric_summary outside_step_ms;   // (engine e2e - device_wall) / device steps: serving work between jobs
};

// Over measured (not warm-up), successful, joined records; join counts over all measured.
clocks_summary summarize_clocks(std::span<const request_record> records, std::uint64_t seed);
boost::json::object clocks_json(const clocks_summary& c);
std::string clocks_table(const clocks_summary& c, const std::string& title);

}  // namespace calserve::loadgen
