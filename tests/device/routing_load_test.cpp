// ep priced from recorded routing counts (device/sim/routing_load.hpp): uniform counts
// are skew 0, counts concentrated on one chip's experts raise the imbalance and slow
// the step, each layer waits for its own hottest chip, and counts that do not match
// the package are refused with what differs.
#include <catch2/catch.hpp>

#include "device/sim/latency_model.hpp"
#include "sim_fixture.hpp"

using namespace calserve;
using namespace calserve::device;
namespace dt = calserve::device::test;

namespace {
package_spec moe_spec() { return dt::moe_30b_spec(); }

// 1024 tokens per layer, 8 experts each: spread evenly over the 128 experts, or, in the
// layers `hot` names, all on the even experts (chip 0's under e mod 2).
model::routing_counts counts(bool (*hot)(std::size_t layer)) {
    auto c = model::make_routing_counts(48, 128, 8);
    for (std::size_t l = 0; l < 48; ++l) {
        std::vector<std::uint64_t> rows(128, 64);
        if (hot(l))
            for (std::size_t e = 0; e < 128; ++e) rows[e] = e % 2 == 0 ? 128 : 0;
        c.add(l, 1024, rows);
    }
    return c;
}
bool none(std::size_t) { return false; }
bool all(std::size_t) { return true; }
bool first(std::size_t l) { return l == 0; }

sim::latency_model ep_model(const model::routing_counts* c, double skew = 0) {
    sim::latency_constants k;
    k.placement = sim::parallel_kind::ep;
    k.routing_skew = skew;
    if (c) k.routing = std::make_shared<const model::routing_counts>(*c);
    return sim::latency_model(moe_spec(), k);
}
double decode_ms(const sim::latency_model& m, std::int64_t batch) {
    std::vector<std::int64_t> pasts(std::size_t(batch), 1024);
    return m.decode_batch_step(pasts, batch).total_ms;
}
}  // namespace

TEST_CASE("routing counts: uniform counts are skew 0, imbalance 1 in every layer", "[placement][routing]") {
    const auto uniform = counts(none);
    REQUIRE(sim::check_routing(moe_spec(), uniform));
    const auto by_counts = ep_model(&uniform), by_skew = ep_model(nullptr, 0);
    CHECK(by_counts.imbalance() == Approx(1.0));
    REQUIRE(by_counts.layer_imbalance().size() == 48);
    for (double x : by_counts.layer_imbalance()) CHECK(x == Approx(1.0));
    CHECK(by_skew.layer_imbalance().empty());
    for (std::int64_t b : {1, 2, 4, 8, 16}) CHECK(decode_ms(by_counts, b) == Approx(decode_ms(by_skew, b)).epsilon(1e-9));
    CHECK(by_counts.step(submodel_kind::prefill, 2048, 0).total_ms ==
          Approx(by_skew.step(submodel_kind::prefill, 2048, 0).total_ms).epsilon(1e-9));
    // The counts replace the skew: a skew beside them changes nothing.
    CHECK(decode_ms(ep_model(&uniform, 2.0), 8) == Approx(decode_ms(by_skew, 8)).epsilon(1e-9));
}

TEST_CASE("routing counts: tokens concentrated on one chip's experts slow the ep step", "[placement][routing]") {
    const auto uniform = counts(none), hot = counts(all), one_layer = counts(first);
    const auto even = ep_model(&uniform), skewed = ep_model(&hot), partly = ep_model(&one_layer);
    CHECK(skewed.imbalance() == Approx(2.0));  // every pair on chip 0 of 2
    CHECK(partly.layer_imbalance()[0] == Approx(2.0));
    CHECK(partly.layer_imbalance()[1] == Approx(1.0));
    CHECK(partly.imbalance() == Approx((2.0 + 47.0) / 48.0));
    CHECK(skewed.step(submodel_kind::prefill, 2048, 0).total_ms > 1.2 * even.step(submodel_kind::prefill, 2048, 0).total_ms);
    CHECK(partly.step(submodel_kind::prefill, 2048, 0).total_ms > even.step(submodel_kind::prefill, 2048, 0).total_ms);
    CHECK(partly.step(submodel_kind::prefill, 2048, 0).total_ms < skewed.step(submodel_kind::prefill, 2048, 0).total_ms);
    CHECK(decode_ms(skewed, 16) > decode_ms(even, 16));
}

TEST_CASE("routing counts: a table that does not match the package is refused", "[placement][routing]") {
    const auto spec = moe_spec();
    const auto message = [&](const model::routing_counts& c) {
        auto r = sim::check_routing(spec, c);
        REQUIRE_FALSE(r);
        CHECK(r.code() == status::invalid_argument);
        return r.error().message;
    };
    CHECK_THAT(message(model::make_routing_counts(24, 128, 8)), Catch::Contains("24 layers, the package has 48"));
    CHECK_THAT(message(model::make_routing_counts(48, 64, 8)), Catch::Contains("64 experts per layer, the package has 128"));
    auto wrong_k = counts(none);
    wrong_k.top_k = 4;
    CHECK_THAT(message(wrong_k), Catch::Contains("top_k 4"));
    CHECK_THAT(message(model::make_routing_counts(48, 128, 8)), Catch::Contains("layer 0 has no routed tokens"));
    auto dense = spec;
    dense.num_experts = 0;
    CHECK_FALSE(sim::check_routing(dense, counts(none)));
    // The model never prices a mismatched table: it keeps the skew's figures.
    const auto mismatched = model::make_routing_counts(24, 128, 8);
    CHECK(ep_model(&mismatched, 1.0).imbalance() == Approx(ep_model(nullptr, 1.0).imbalance()));
    CHECK(ep_model(&mismatched).layer_imbalance().empty());
}
