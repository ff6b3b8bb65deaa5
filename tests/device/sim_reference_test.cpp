// The simulator with the real reference transformer behind it: packages written by
// `pack` load into the device, and the device's logits match the reference model
// run without the device (golden), for the dense 1-chip and the MoE 2-chip (TP2) presets.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "device/package_spec.hpp"
#include "device/runner/runner.hpp"
#include "device/sim/cpu_backend.hpp"
#include "device/sim/reference_model.hpp"
#include "model/package/pack.hpp"
#include "model/weights/synthetic_model.hpp"
#include "model/cpu/transformer.hpp"
#include "tests/support/test_paths.hpp"

using namespace calserve;
using namespace calserve::device;
using namespace std::chrono_literals;

namespace {
std::filesystem::path packed(const std::string& preset, bool s8_v = false) {
    model::package::pack_options po;
    po.preset = preset;
    po.s8_v_cache = s8_v;
    po.out = test::scratch_dir("device-" + preset + (s8_v ? "-s8v" : "")) / "pkg";
    po.tokenizer_dir = test::tokenizer_dir();
    auto p = model::package::pack(po);
    REQUIRE(p.ok());
    return p->root;
}

bool sanitized() { return std::getenv("CALSERVE_SANITIZED") != nullptr; }

void golden_for(const std::string& preset) {
    const auto dir = packed(preset);
    auto cfg = config::defaults();
    sim::manual_scheduler clock;
    auto dev = sim::open_sim_device(dir, cfg, clock);
    REQUIRE(dev.ok());
    CHECK((*dev)->package().chip_count == (preset == "tiny-moe-2chip" ? 2u : 1u));
    model::load_options lo;
    lo.tensor_parallel = 1;  // the reference runs unsplit, without the device
    auto reference = model::load_causal_lm((*dev)->package().reference_model_dir, lo);
    REQUIRE(reference.ok());
    runner::runner_options o;
    o.wait_limit = 60s;
    o.prefill_lengths = sanitized() ? std::vector<std::int64_t>{1, 17} : std::vector<std::int64_t>{1, 16, 17, 128};
    o.decode_lengths = sanitized() ? std::vector<std::int64_t>{1, 4} : std::vector<std::int64_t>{1, 32};
    auto rep = runner::run_golden(**dev, **reference, o);
    INFO(boost::json::serialize(rep.json));
    CHECK(rep.pass);
    for (const auto& c : rep.json.at("cases").as_array()) {
        for (const auto& cp : c.at("decode_checkpoints").as_array()) {
            CHECK(cp.at("greedy_identical").as_bool());
            CHECK(cp.at("cosine_min").as_double() > 0.9999);
        }
    }
}
}  // namespace

TEST_CASE("package_spec from a packed package carries names, I/O, CSRs, KV and chips") {
    const auto dir = packed("tiny-moe-2chip");
    auto spec = package_spec_from_dir(dir);
    REQUIRE(spec.ok());
    CHECK(spec->chip_count == 2);
    REQUIRE(spec->first_of(submodel_kind::prefill) != nullptr);
    REQUIRE(spec->first_of(submodel_kind::decode) != nullptr);
    const auto& dec = *spec->first_of(submodel_kind::decode);
    CHECK(dec.max_tokens == 1);
    for (const auto& t : dec.outputs) {
        CHECK(t.ping_address != t.pong_address);
        if (t.name == "logits") CHECK(t.elements() == spec->vocab_size);
    }
    CHECK(spec->kv.capacity_tokens() >= spec->context);
    CHECK(spec->total_parameter_bytes() > 0);
    CHECK(spec->hidden_size > 0);
    CHECK(spec->num_experts > 0);
}

TEST_CASE("golden: dense 1-chip device equals the reference transformer") { golden_for("tiny-dense-1chip"); }

TEST_CASE("golden: MoE 2-chip tensor-parallel device equals the unsplit reference") { golden_for("tiny-moe-2chip"); }

TEST_CASE("configure of a real package that does not fit: out_of_device_memory") {
    const auto dir = packed("tiny-dense-1chip");
    auto cfg = config::defaults();
    REQUIRE(cfg.set("device.sim.dram_bytes_per_chip=1048576").ok());
    sim::manual_scheduler clock;
    auto dev = sim::open_sim_device(dir, cfg, clock);
    REQUIRE_FALSE(dev.ok());
    CHECK(dev.code() == status::out_of_device_memory);
}

TEST_CASE("cpu backend: a plain HF directory behind the same device interface, unpaced") {
    const auto dir = test::scratch_dir("device-cpu") / "model";
    REQUIRE(model::make_synthetic_model("tiny-dense", dir, 3, "f32", {}).ok());
    auto cfg = config::defaults();
    sim::manual_scheduler clock;
    auto dev = sim::open_cpu_device(dir, cfg, clock);
    REQUIRE(dev.ok());
    const auto& pkg = (*dev)->package();
    CHECK(pkg.chip_count == 1);
    CHECK(pkg.kv.slots == cfg.integer("runtime.max_running"));
    model::load_options lo;
    auto reference = model::load_causal_lm(dir, lo);
    REQUIRE(reference.ok());
    runner::runner_options o;
    o.prefill_lengths = {1, 17};
    o.decode_lengths = {1, 4};
    const auto t0 = clock.now();
    auto rep = runner::run_golden(**dev, **reference, o);
    INFO(boost::json::serialize(rep.json));
    CHECK(rep.pass);
    CHECK(clock.now() == t0);  // no NPU pacing: virtual time never moved
}

TEST_CASE("S8 V-cache package: the simulator runs the reference model's S8 V mode and equals it") {
    const auto dir = packed("tiny-dense-1chip", true);
    auto spec = package_spec_from_dir(dir);
    REQUIRE(spec.ok());
    CHECK(spec->kv.v_bytes == 1);
    CHECK(spec->kv.v_scale_bytes == 4);
    CHECK(spec->kv.bytes_per_token() == spec->kv.layers * spec->kv.kv_heads * (spec->kv.head_dim * 3 + 4));
    auto lm = sim::reference_model_factory(2)(*spec);
    REQUIRE(lm.ok());
    auto* t = dynamic_cast<model::transformer*>(lm->get());
    REQUIRE(t != nullptr);
    CHECK(t->v_cache() == model::v_cache_dtype::s8);

    auto cfg = config::defaults();
    sim::manual_scheduler clock;
    auto dev = sim::open_sim_device(dir, cfg, clock);  // warmup checks the package's (S8 V) golden corpus
    REQUIRE(dev.ok());
    model::load_options lo;
    lo.v_cache = model::v_cache_dtype::s8;
    auto reference = model::load_causal_lm((*dev)->package().reference_model_dir, lo);
    REQUIRE(reference.ok());
    runner::runner_options o;
    o.wait_limit = 60s;
    o.prefill_lengths = {1, 17, 128};
    o.decode_lengths = {1, 32};
    auto rep = runner::run_golden(**dev, **reference, o);
    INFO(boost::json::serialize(rep.json));
    CHECK(rep.pass);
}
