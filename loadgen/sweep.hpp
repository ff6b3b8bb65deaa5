#pragma once
//! Built-in sweeps of `calserve bench --sweep AXIS=V1,V2,...`: one cell per value
//! of one axis (concurrency, prompt-tokens, output-tokens or rate), each run as a
//! normal bench into its own subdirectory, and a sweep table over the cells.
//!
//! Fault model: a bad spec is an error naming what is wrong, before any load. A
//! cell whose prompt + output cannot fit the server's context is skipped with a
//! note, never silently capped (a capped cell would repeat another cell's value).
//! Invariant: cells keep the order of the values given; names are unique.
#include <boost/json/object.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/result.hpp"
#include "loadgen/report.hpp"
#include "loadgen/run.hpp"

namespace calserve::loadgen {

enum class sweep_axis : std::uint8_t { concurrency, prompt_tokens, output_tokens, rate };
std::string_view to_string(sweep_axis a);  // the spelling of --sweep: "prompt-tokens", ...

struct sweep_spec {
    sweep_axis axis = sweep_axis::concurrency;
    std::vector<double> values;  // in the order given; integers for every axis but rate
};

// Parses "concurrency=1,2,4", "prompt-tokens=16,1K", "output-tokens=1,32", "rate=0.5,2".
result<sweep_spec> parse_sweep(std::string_view text);

// "concurrency-4", "prompt-tokens-1024", "rate-0.5": the cell's subdirectory.
std::string cell_name(sweep_axis axis, double value);

// The options of one cell: `base` with the axis set to `value`. A rate cell is
// open loop (`open_kind`: poisson or constant); a concurrency cell closed loop.
run_options cell_options(const run_options& base, sweep_axis axis, double value, arrival_kind open_kind);

// Whether a cell fits the context: prompt + output <= context (0: unknown, fits).
bool fits_context(std::int64_t prompt_tokens, std::int64_t output_tokens, std::int64_t context);

struct sweep_row {
    std::string cell;
    double value = 0;
    std::string server;  // target label ("a", "b")
    run_summary summary;
};

boost::json::object sweep_json(const sweep_spec& spec, const std::vector<sweep_row>& rows,
                               const std::vector<std::string>& skipped);
std::string sweep_table(const sweep_spec& spec, const std::vector<sweep_row>& rows,
                        const std::vector<std::string>& skipped);

}  // namespace calserve::loadgen
