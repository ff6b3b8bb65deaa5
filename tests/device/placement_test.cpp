// Placements in the latency model (device/sim/latency_model.hpp): tensor-, expert-
// and pipeline-parallel costs of one MoE package, and ep's hot-expert imbalance.
#include <catch2/catch.hpp>

#include "device/sim/latency_model.hpp"
#include "sim_fixture.hpp"

using namespace calserve;
using namespace calserve::device;
namespace dt = calserve::device::test;

namespace {
package_spec moe_spec() { return dt::moe_30b_spec(); }
sim::latency_model model_of(sim::parallel_kind p, double skew = 0, int micro = 0) {
    sim::latency_constants c;
    c.placement = p;
    c.routing_skew = skew;
    c.micro_batches = micro;
    return sim::latency_model(moe_spec(), c);
}
double decode_ms(const sim::latency_model& m, std::int64_t batch) {
    std::vector<std::int64_t> pasts(std::size_t(batch), 1024);
    return m.decode_batch_step(pasts, batch).total_ms;
}
}  // namespace

TEST_CASE("placements: names round-trip, tp is today's model", "[placement]") {
    for (auto p : {sim::parallel_kind::tp, sim::parallel_kind::ep, sim::parallel_kind::pp})
        CHECK(sim::parse_parallel(sim::to_string(p)) == p);
    CHECK_FALSE(sim::parse_parallel("dp").has_value());
    const auto tp = model_of(sim::parallel_kind::tp);
    const sim::latency_model today(moe_spec(), sim::latency_constants{});
    CHECK(decode_ms(tp, 4) == decode_ms(today, 4));
    CHECK(tp.placed_parameter_bytes(1) == 9'000'000'000ull);
    CHECK(tp.link_bytes_per_token() == 2.0 * 48 * 2048 * 2);  // an all-reduce of the hidden vector, 2 per layer
    CHECK(tp.imbalance() == 1.0);
}

TEST_CASE("placements: ep moves (row, remote expert) pairs, its hottest chip sets the step", "[placement]") {
    const auto even = model_of(sim::parallel_kind::ep, 0);
    CHECK(even.link_bytes_per_token() == Approx(2.0 * 48 * 8 * 0.5 * 2048 * 2));  // dispatch + combine
    CHECK(even.imbalance() == Approx(1.0));
    // Attention and embeddings replicated, half of the experts on each chip: more bytes than tp's half.
    CHECK(even.placed_parameter_bytes(0) > 9'000'000'000ull);
    CHECK(even.placed_parameter_bytes(0) < 18'000'000'000ull);
    const auto mild = model_of(sim::parallel_kind::ep, 1.0), hot = model_of(sim::parallel_kind::ep, 2.0);
    CHECK(mild.imbalance() > 1.05);
    CHECK(hot.imbalance() > mild.imbalance());
    CHECK(hot.imbalance() <= 2.0);
    // A skewed routing concentrates the expert work on one chip: a long prefill, which
    // touches every expert anyway, waits for it. (A small decode batch may get faster: its
    // rows share the popular experts, so fewer distinct ones are read.)
    CHECK(hot.step(submodel_kind::prefill, 2048, 0).total_ms > even.step(submodel_kind::prefill, 2048, 0).total_ms);
    // Prefill touches every expert on both chips: the link's all-to-all shows.
    CHECK(even.step(submodel_kind::prefill, 2048, 0).d2d_bytes == Approx(1024 * even.link_bytes_per_token()));
}

TEST_CASE("placements: pp crosses the link once per boundary and pays a bubble at small batch", "[placement]") {
    const auto pp = model_of(sim::parallel_kind::pp), tp = model_of(sim::parallel_kind::tp);
    CHECK(pp.link_bytes_per_token() == 2048 * 2);
    CHECK(pp.placed_parameter_bytes(0) == 9'000'000'000ull);
    // Batch 1: one micro-batch through two stages, each reading its half of the weights
    // in turn while the other chip idles; tp reads both halves at once.
    CHECK(decode_ms(pp, 1) > 1.5 * decode_ms(tp, 1));
    // Micro-batches: each one crosses the boundary.
    const auto two = pp.decode_batch_step(std::vector<std::int64_t>(8, 1024), 8);
    const auto one = model_of(sim::parallel_kind::pp, 0, 1).decode_batch_step(std::vector<std::int64_t>(8, 1024), 8);
    CHECK(two.syncs == 2);  // one boundary x two micro-batches
    CHECK(one.syncs == 1);
}
