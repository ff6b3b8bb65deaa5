// `runner speculative` on the simulator: plain and drafting runs give identical tokens,
// a looping model's drafts are accepted (fewer steps, less device time), a random
// model's are not and the policy stops drafting; a device whose verify pass computed
// other numbers than its decode steps fails the comparison; KV is back to zero.
#include <catch2/catch.hpp>

#include "device/package_spec.hpp"
#include "device/runner/speculative.hpp"
#include "sim_fixture.hpp"

using namespace calserve;
using namespace calserve::device;
using namespace std::chrono_literals;
namespace dt = calserve::device::test;
using dt::head_spec;

namespace {

// Greedy output repeats with period 3 (the token three back gets the top logit), the
// rest of the row from the history: n-gram lookup finds the loop. `skew_runs`: a verify
// pass whose positions differ from the decode steps (what the comparison must catch).
class loop_lm final : public model::causal_lm {
public:
    loop_lm(std::int64_t vocab, bool skew_runs) : inner_(vocab), skew_(skew_runs) { shape_ = inner_.shape(); }
    const model::model_shape& shape() const override { return shape_; }
    void_result prefill(model::seq_id s, std::span<const model::token_id> t, std::span<float> l) override {
        hist_[s].insert(hist_[s].end(), t.begin(), t.end());
        (void)inner_.prefill(s, t, l);
        boost(s, l);
        return {};
    }
    void_result decode(model::seq_id s, model::token_id t, std::span<float> l) override {
        hist_[s].push_back(t);
        (void)inner_.decode(s, t, l);
        boost(s, l);
        return {};
    }
    void_result decode_runs(std::span<const model::seq_id> seqs, std::span<const std::int64_t> counts,
                            std::span<const model::token_id> tokens, std::span<float> logits) override {
        if (auto r = causal_lm::decode_runs(seqs, counts, tokens, logits); !r) return r;
        if (skew_)
            for (std::size_t p = 0; p < tokens.size(); ++p) logits[p * std::size_t(shape_.vocab_size) + 5] += 100.0f;
        return {};
    }
    std::int64_t sequence_length(model::seq_id s) const override { return inner_.sequence_length(s); }
    void_result truncate(model::seq_id s, std::int64_t n) override {
        hist_[s].resize(std::size_t(n));
        return inner_.truncate(s, n);
    }
    void free_sequence(model::seq_id s) override {
        hist_.erase(s);
        inner_.free_sequence(s);
    }
    void free_all() override {
        hist_.clear();
        inner_.free_all();
    }

private:
    void boost(model::seq_id s, std::span<float> l) {
        const auto& h = hist_[s];
        if (h.size() >= 3) l[std::size_t(h[h.size() - 3])] += 50.0f;
    }
    dt::history_lm inner_;
    bool skew_;
    model::model_shape shape_;
    std::map<model::seq_id, std::vector<model::token_id>> hist_;
};

std::shared_ptr<sim::sim_device> open(sim::manual_scheduler& clock, bool skew) {
    sim::sim_options o;
    o.scheduler = &clock;
    o.kv_block_tokens = 16;
    o.make_model = [skew](const package_spec& s) -> result<std::unique_ptr<model::causal_lm>> {
        return std::unique_ptr<model::causal_lm>(std::make_unique<loop_lm>(s.vocab_size, skew));
    };
    auto dev = sim::sim_device::create(std::move(o));
    REQUIRE(dev->load(head_spec()).ok());
    REQUIRE(dev->configure().ok());
    REQUIRE(dev->warmup().ok());
    return dev;
}

runner::speculative_options options(int sequences, float temperature) {
    runner::speculative_options o;
    o.sequences = sequences;
    o.prompt_tokens = 12;
    o.max_tokens = 40;
    o.temperature = temperature;
    o.seed = 5;
    o.wait_limit = 5s;
    o.spec.drafter.kind = model::speculative::method::ngram;
    o.spec.policy.enabled = true;
    o.position_cost = 0.05;
    return o;
}
}  // namespace

TEST_CASE("runner speculative: a looping model's drafts are kept, with the tokens of plain decoding") {
    for (int sequences : {1, 3}) {
        INFO("sequences " << sequences);
        sim::manual_scheduler clock;
        auto dev = open(clock, false);
        auto rep = runner::run_speculative(*dev, options(sequences, 0.0f));
        INFO(boost::json::serialize(rep.json));
        CHECK(rep.pass);
        const auto& on = rep.json.at("drafting").as_object();
        const auto& off = rep.json.at("plain").as_object();
        CHECK(on.at("accepted").as_int64() > 20 * sequences);
        CHECK(on.at("steps").as_int64() < off.at("steps").as_int64() / 2);
        CHECK(rep.json.at("device_speedup").as_double() > 1.5);
        CHECK(dev->kv().sequences == 0);
    }
}

TEST_CASE("runner speculative: seeded sampling gives the same tokens; the policy stops drafting what it loses") {
    sim::manual_scheduler clock;
    auto dev = open(clock, false);
    auto rep = runner::run_speculative(*dev, options(2, 1.0f));
    INFO(boost::json::serialize(rep.json));
    CHECK(rep.pass);
    CHECK(rep.json.at("drafting").at("drafted").as_int64() > 0);
}

TEST_CASE("runner speculative: a verify pass with other numbers than decode steps fails the comparison") {
    sim::manual_scheduler clock;
    auto dev = open(clock, true);
    auto rep = runner::run_speculative(*dev, options(1, 0.0f));
    CHECK_FALSE(rep.pass);
}
