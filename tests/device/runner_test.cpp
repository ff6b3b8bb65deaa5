// The G7 runner on the simulator with the test-double model: golden passes on a
// healthy device and fails when the device's numbers are wrong; every fault
// scenario is returned as its structured status; stress drains to zero KV.
#include <catch2/catch.hpp>

#include "device/runner/host_session.hpp"
#include "device/runner/runner.hpp"
#include "sim_fixture.hpp"

using namespace calserve;
using namespace calserve::device;
using namespace std::chrono_literals;

namespace {
runner::runner_options small_options() {
    runner::runner_options o;
    o.wait_limit = 5s;
    o.prefill_lengths = {1, 16, 17, -1};
    o.decode_lengths = {1, 32};
    o.duration = 100ms;
    o.max_prompt = 24;
    o.max_decode = 8;
    o.sequences = 4;
    return o;
}

// A reference whose history differs from the device's by one token: every logit row differs.
class shifted_lm final : public model::causal_lm {
public:
    explicit shifted_lm(std::int64_t vocab) : inner_(vocab) {}
    const model::model_shape& shape() const override { return inner_.shape(); }
    void_result prefill(model::seq_id s, std::span<const model::token_id> t, std::span<float> l) override {
        std::vector<model::token_id> v(t.begin(), t.end());
        v.push_back(1);
        return inner_.prefill(s, v, l);
    }
    void_result decode(model::seq_id s, model::token_id t, std::span<float> l) override { return inner_.decode(s, t, l); }
    std::int64_t sequence_length(model::seq_id s) const override { return inner_.sequence_length(s); }
    void free_sequence(model::seq_id s) override { inner_.free_sequence(s); }
    void free_all() override { inner_.free_all(); }

private:
    test::history_lm inner_;
};
}  // namespace

TEST_CASE("runner golden passes against an identical reference and reports every case") {
    test::sim_fixture f(0.5, 0.1);
    test::history_lm reference(test::k_vocab);
    auto rep = runner::run_golden(*f.dev, reference, small_options());
    INFO(boost::json::serialize(rep.json));
    CHECK(rep.pass);
    const auto& cases = rep.json.at("cases").as_array();
    REQUIRE(cases.size() == 4);
    CHECK(cases[3].at("prefill").as_int64() == test::k_context - 1);
    // max-1 prefill leaves room for one decode only: the checkpoint is capped.
    const auto& last = cases[3].at("decode_checkpoints").as_array();
    REQUIRE(last.size() == 1);
    CHECK(last[0].at("kv_length").as_int64() == test::k_context);
    CHECK(rep.json.at("free_then_reuse").at("pass").as_bool());
    CHECK(rep.json.at("interleaved").at("pass").as_bool());
    CHECK(f.dev->kv().blocks_used == 0);
}

TEST_CASE("runner golden fails when the device's numbers differ from the reference") {
    test::sim_fixture f(0.5, 0.1);
    shifted_lm reference(test::k_vocab);
    auto rep = runner::run_golden(*f.dev, reference, small_options());
    CHECK_FALSE(rep.pass);
    CHECK(rep.json.at("verdict").as_string() == "fail");
}

TEST_CASE("runner fault: every scenario returns its structured status and the device recovers") {
    test::sim_fixture f(0.5, 0.1);
    test::history_lm reference(test::k_vocab);
    auto rep = runner::run_fault(*f.dev, f.dev->faults(), reference, small_options());
    INFO(boost::json::serialize(rep.json));
    CHECK(rep.pass);
    std::vector<std::string> names;
    for (const auto& s : rep.json.at("scenarios").as_array()) {
        names.emplace_back(s.at("scenario").as_string());
        CHECK(s.at("got").as_string() == s.at("expected").as_string());
        CHECK(s.at("recovered").as_bool());
    }
    for (const char* g7 : {"missing_tensor", "wrong_csr", "slice_out_of_range", "kv_full", "submit_busy",
                           "wait_timeout", "ccu_exception", "reset_then_warmup"})
        CHECK(std::find(names.begin(), names.end(), g7) != names.end());
    CHECK(f.dev->status().state == device_state::ready);
}

TEST_CASE("runner stress: random sequences, two in flight, KV back to zero, replay identical") {
    test::sim_fixture f(0.2, 0.1);
    test::history_lm reference(test::k_vocab);
    auto rep = runner::run_stress(*f.dev, reference, small_options());
    INFO(boost::json::serialize(rep.json));
    CHECK(rep.pass);
    CHECK(rep.json.at("kv_blocks_used_at_end").as_int64() == 0);
    CHECK(rep.json.at("sequences_finished").as_uint64() > 0);
}

TEST_CASE("logits comparison metrics") {
    const std::vector<float> a{1, 5, 3, 2, 4, 0}, b{1, 5, 3, 2, 4, 0}, c{5, 1, 3, 2, 4, 0};
    auto same = runner::compare_logits(a, b);
    CHECK(same.max_abs == 0);
    CHECK(same.cosine == Approx(1.0));
    CHECK(same.top1_match);
    CHECK(same.top5_overlap == 5);
    auto swapped = runner::compare_logits(a, c);
    CHECK(swapped.max_abs == 4);
    CHECK_FALSE(swapped.top1_match);
    CHECK(swapped.top5_overlap == 5);
    CHECK(swapped.cosine < 1.0);
}

TEST_CASE("runner stress and fault in real time: timer and compute threads, same verdicts") {
    sim::realtime_scheduler clock;
    sim::sim_options so;
    so.scheduler = &clock;
    so.latency.step_ms = 0.2;
    so.latency.d2h_ms = 0.1;
    so.kv_block_tokens = 16;
    so.make_model = [](const package_spec& s) -> result<std::unique_ptr<model::causal_lm>> {
        return std::unique_ptr<model::causal_lm>(std::make_unique<test::history_lm>(s.vocab_size));
    };
    auto dev = sim::sim_device::create(so);
    REQUIRE(dev->load(test::tiny_spec()).ok());
    REQUIRE(dev->configure().ok());
    REQUIRE(dev->warmup().ok());
    test::history_lm reference(test::k_vocab);
    auto o = small_options();
    o.fault_wait_limit = 50ms;
    auto stress = runner::run_stress(*dev, reference, o);
    INFO(boost::json::serialize(stress.json));
    CHECK(stress.pass);
    auto fault = runner::run_fault(*dev, dev->faults(), reference, o);
    INFO(boost::json::serialize(fault.json));
    CHECK(fault.pass);
}
