#pragma once
//! A `calserve bench` workload file (`requests.jsonl`, one record per request:
//! send, first-token and done times in seconds, prompt and output lengths) read
//! as a trace for the what-if replay (docs/twin.md): each record becomes a submit
//! at its send time and a `done` with the client's measured times, so traffic
//! benched against any OpenAI server can be replayed on a candidate.
//!
//! The file has no token ids, only prompt lengths: prompts are drawn from a
//! generator seeded by `seed` (ids below `vocab`), greedy, EOS ignored, each
//! `max_tokens` long as recorded. What that loses (prompt content, so prefix
//! cache hits and stop conditions) is said in docs/twin.md.
//!
//! Fault model: an unreadable file, a line that is not a bench record or a file
//! with no usable record is an error naming the line; failed requests are skipped.
#include <cstdint>
#include <string>

#include "config/result.hpp"
#include "io/trace.hpp"

namespace calserve::io {

// True when the file's first line is a bench record (has "t_send"), not a trace record.
bool is_bench_workload(const std::string& path);

// The header names no package: the caller sets `package_dir` (and overrides).
result<trace_file> read_bench_workload(const std::string& path, std::uint64_t seed, std::int64_t vocab);

}  // namespace calserve::io
