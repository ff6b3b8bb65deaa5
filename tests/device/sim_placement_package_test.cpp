// Packages that carry their placement (docs/package-format.md "Placement"): the
// simulator prices a tp, ep or pp package of one model with its manifest's placement
// (the latency model of device.sim.placement, which wins when set), and computes the
// same tokens on all three: each equals the reference model, greedy token for token.
#include <catch2/catch.hpp>

#include "device/runner/runner.hpp"
#include "device/sim/reference_model.hpp"
#include "model/cpu/transformer.hpp"
#include "model/package/pack.hpp"
#include "tests/support/test_paths.hpp"

using namespace calserve;
using namespace calserve::device;
using namespace std::chrono_literals;

namespace {
std::filesystem::path packed(const std::string& placement) {
    model::package::pack_options po;
    po.preset = "tiny-moe-2chip";
    po.placement = placement;
    po.out = test::scratch_dir("device-placement-" + placement) / "pkg";
    po.tokenizer_dir = test::tokenizer_dir();
    auto p = model::package::pack(po);
    INFO((p.ok() ? std::string() : p.error().what()));
    REQUIRE(p.ok());
    return p->root;
}

struct served {
    sim::parallel_kind placement = sim::parallel_kind::tp;
    double decode4_ms = 0, prefill_ms = 0, link_bytes_per_token = 0;
};

// Opens the package on the simulator, checks its tokens against the unsplit reference
// model and returns the modelled costs the device prices its jobs by.
served serve(const std::filesystem::path& dir, const std::vector<std::string>& overrides = {}) {
    auto cfg = config::defaults();
    for (const auto& kv : overrides) REQUIRE(cfg.set(kv).ok());
    sim::manual_scheduler clock;
    auto dev = sim::open_sim_device(dir, cfg, clock);
    REQUIRE(dev.ok());
    model::load_options lo;
    lo.tensor_parallel = 1;
    auto reference = model::load_causal_lm((*dev)->package().reference_model_dir, lo);
    REQUIRE(reference.ok());
    runner::runner_options o;
    o.wait_limit = 60s;
    o.prefill_lengths = {1, 17};
    o.decode_lengths = {1, 8};
    auto rep = runner::run_golden(**dev, **reference, o);
    INFO(boost::json::serialize(rep.json));
    CHECK(rep.pass);
    for (const auto& c : rep.json.at("cases").as_array())
        for (const auto& cp : c.at("decode_checkpoints").as_array()) CHECK(cp.at("greedy_identical").as_bool());
    const auto* m = (*dev)->latency();
    REQUIRE(m != nullptr);
    const std::vector<std::int64_t> pasts(4, 256);
    return {m->constants().placement, m->decode_batch_step(pasts, 4).total_ms,
            m->step(submodel_kind::prefill, 512, 0).total_ms, m->link_bytes_per_token()};
}
}  // namespace

TEST_CASE("sim: a package is priced with its manifest's placement, its tokens unchanged") {
    const auto tp = serve(packed("tp")), ep = serve(packed("ep")), pp = serve(packed("pp"));
    CHECK(tp.placement == sim::parallel_kind::tp);
    CHECK(ep.placement == sim::parallel_kind::ep);
    CHECK(pp.placement == sim::parallel_kind::pp);
    // Different modelled costs: ep's all-to-all (10 us each) against tp's all-reduces (5 us), pp's
    // one crossing per stage boundary and its bubble at a small batch.
    CHECK(pp.link_bytes_per_token < tp.link_bytes_per_token);
    CHECK(ep.decode4_ms != Approx(tp.decode4_ms));
    CHECK(pp.decode4_ms > tp.decode4_ms);
    CHECK(pp.prefill_ms != Approx(tp.prefill_ms));
}

TEST_CASE("sim: device.sim.placement set explicitly wins over the manifest") {
    const auto dir = packed("ep");
    const auto as_tp = serve(dir, {"device.sim.placement=tp"});
    const auto as_package = serve(dir, {"device.sim.placement=package"});
    const auto tp = serve(packed("tp"));
    CHECK(as_tp.placement == sim::parallel_kind::tp);
    CHECK(as_tp.decode4_ms == Approx(tp.decode4_ms));
    CHECK(as_package.placement == sim::parallel_kind::ep);
    const auto pp_on_tp = serve(packed("tp"), {"device.sim.placement=pp"});
    CHECK(pp_on_tp.placement == sim::parallel_kind::pp);
}
