// generation_host: generations of one alias as a step machine on the deterministic
// runtime (recordable daemons, replay). Two packages of the tiny preset (seeds 1, 2:
// other weights, other golden corpus); greedy streams compared with each
// generation's solo run; the same inputs must give the same message stream.
#include <catch2/catch.hpp>
#include <filesystem>
#include <spdlog/spdlog.h>

#include "actors/device_actor.hpp"
#include "engine/generation_host.hpp"
#include "actors/runtime/runtime.hpp"
#include "tests/actors/engine_fixture.hpp"
#include "tests/support/model_support.hpp"
#include "tests/support/test_paths.hpp"

using namespace calserve;
using namespace calserve::test;
namespace fs = std::filesystem;

namespace {

// A greedy request ignoring EOS (as the load steps make them).
actors::generation_request greedy(std::string id, std::vector<actors::token_id> prompt, std::int64_t tokens) {
    actors::generation_request r;
    r.id = std::move(id);
    r.prompt = std::move(prompt);
    r.sampling.temperature = 0;
    r.max_tokens = tokens;
    r.ignore_eos = true;
    return r;
}

const std::string k_preset = "tiny-dense-1chip";
const fs::path& gen1() { return test_package_dir(k_preset, 1); }
const fs::path& gen2() { return test_package_dir(k_preset, 2); }
const std::vector<actors::token_id> k_prompt{11, 12, 13, 14, 15};
constexpr std::int64_t k_tokens = 16;

struct host_run {
    actors::runtime rt{actors::run_mode::deterministic, 1};
    std::unique_ptr<engine::generation_host> host;
    std::vector<std::string> messages;  // time, from, to, type of every delivery
    std::uint64_t next_id = 0;

    explicit host_run(const fs::path& package, std::vector<std::string> overrides = {}) {
        spdlog::set_level(spdlog::level::off);  // failed loads log by design
        rt.set_delivery_hook([this](const actors::delivery& d) {
            messages.push_back(std::to_string(d.time.count()) + " " + std::string(d.from_name) + " -> " +
                               std::string(d.to_name) + " " + std::string(d.type));
        });
        overrides.push_back("device.sim.step_ms=2");
        auto cfg = config::load(std::nullopt, overrides);
        REQUIRE(cfg.ok());
        engine::engine_setup s;
        s.package_dir = package;
        s.model_name = "m";
        auto h = engine::generation_host::create(rt, *cfg, s, std::chrono::milliseconds(120000));
        REQUIRE(h.ok());
        host = std::move(*h);
        run_until([&] { return host->current()->device_state() == actors::device_health::ready; });
    }
    ~host_run() {
        rt.set_delivery_hook({});
        host.reset();
    }
    // Fires timers until `done` (or nothing is pending).
    void run_until(const std::function<bool()>& done) {
        rt.run_until_idle();
        while (!done() && rt.advance_to_next_timer()) {
        }
    }
    std::shared_ptr<recording_sink> submit(std::int64_t tokens = k_tokens) {
        auto sink = std::make_shared<recording_sink>();
        auto r = greedy(std::to_string(++next_id), k_prompt, tokens);
        auto s = host->submit(std::move(r), sink);
        REQUIRE(s.ok());
        return sink;
    }
    engine::generation_info info(std::uint64_t number) {
        for (const auto& g : host->list())
            if (g.generation == number) return g;
        FAIL("no generation " << number);
        return {};
    }
};

std::vector<actors::token_id> solo_run(const fs::path& package) {
    host_run run(package);
    auto sink = run.submit();
    run.run_until([&] { return sink->finishes > 0; });
    REQUIRE(sink->result.reason == actors::finish_reason::length);
    return sink->tokens;
}

// A load mid-stream, a request after the switch, both finished; returns the message stream.
std::vector<std::string> switch_scenario(const std::vector<actors::token_id>& want1,
                                         const std::vector<actors::token_id>& want2) {
    host_run run(gen1());
    auto before = run.submit(64);
    run.run_until([&] { return before->tokens.size() >= 2; });
    auto n = run.host->load(engine::load_request{"m", gen2(), false, false});
    REQUIRE(n.ok());
    CHECK(*n == 2);
    CHECK(run.host->loading());
    CHECK(run.info(2).state == "warming");  // validated, placed and configured at once; warm-up under way
    run.run_until([&] { return !run.host->loading(); });
    CHECK(run.info(2).state == "serving");
    CHECK(run.info(2).current);
    auto after = run.submit();
    run.run_until([&] { return before->finishes > 0 && after->finishes > 0; });
    run.rt.run_until_idle();
    // The request admitted before the switch finished on generation 1, the later one on generation 2.
    CHECK(std::vector<actors::token_id>(before->tokens.begin(), before->tokens.begin() + k_tokens) == want1);
    CHECK(after->tokens == want2);
    CHECK(run.info(1).state == "retired");
    CHECK_FALSE(run.info(1).resident);
    CHECK(run.info(1).tail_requests == 1);
    return run.messages;
}

}  // namespace

TEST_CASE("generation host: a load switches between requests and the same inputs give the same messages",
          "[generation_host]") {
    const auto want1 = solo_run(gen1());
    const auto want2 = solo_run(gen2());
    REQUIRE(want1 != want2);
    auto first = switch_scenario(want1, want2);
    auto second = switch_scenario(want1, want2);
    CHECK(first.size() == second.size());
    CHECK(first == second);
}

TEST_CASE("generation host: a failed golden check leaves the serving generation, unload and rollback work",
          "[generation_host]") {
    const auto want1 = solo_run(gen1());
    auto mutant = scratch_dir("generation-host-golden") / "pkg";
    fs::remove_all(mutant);
    fs::copy(gen1(), mutant, fs::copy_options::recursive);
    fs::copy_file(package_model_dir(gen2()) / "golden.jsonl", mutant / "reference-model" / "golden.jsonl",
                  fs::copy_options::overwrite_existing);

    host_run run(gen1());
    REQUIRE(run.host->load(engine::load_request{"m", mutant, false, false}).ok());
    run.run_until([&] { return !run.host->loading(); });
    CHECK(run.info(2).state == "failed");
    CHECK_THAT(run.info(2).reason, Catch::Contains("golden check"));
    CHECK(run.info(1).current);
    auto sink = run.submit();
    run.run_until([&] { return sink->finishes > 0; });
    CHECK(sink->tokens == want1);

    // Refusals change nothing: another alias, a directory that is no package.
    CHECK_FALSE(run.host->load(engine::load_request{"other", gen2(), false, false}).ok());
    CHECK_FALSE(run.host->load(engine::load_request{"m", scratch_dir("generation-host-golden"), false, false}).ok());
    CHECK(run.host->list().size() == 2);

    REQUIRE(run.host->unload("m").ok());
    auto refused = run.host->submit(greedy("x", k_prompt, 2), std::make_shared<recording_sink>());
    CHECK(refused.code() == status::not_ready);
    run.run_until([&] { return run.info(1).state == "retired"; });
    CHECK_FALSE(run.info(1).resident);
    // Rollback reloads it through the steps (it was unloaded).
    REQUIRE(run.host->rollback("m").ok());
    run.run_until([&] { return !run.host->loading(); });
    CHECK(run.info(1).state == "serving");
    auto again = run.submit();
    run.run_until([&] { return again->finishes > 0; });
    CHECK(again->tokens == want1);
}

TEST_CASE("generation host: a load that does not fit fails, with --replace it drains the serving generation first",
          "[generation_host]") {
    const auto want2 = solo_run(gen2());
    // One tiny package (0.092 GiB with its KV region) + the 0.25 GiB guard fit a chip of this size; two do not.
    host_run run(gen1(), {"device.sim.chips=1", "device.sim.dram_bytes_per_chip=375809638"});
    REQUIRE(run.host->load(engine::load_request{"m", gen2(), false, false}).ok());
    CHECK_FALSE(run.host->loading());  // refused at the plan, synchronously
    CHECK(run.info(2).state == "failed");
    CHECK_THAT(run.info(2).reason, Catch::Contains("does not fit"));
    CHECK(run.info(1).current);

    auto busy = run.submit();  // in flight on generation 1 while it drains
    REQUIRE(run.host->load(engine::load_request{"m", gen2(), true, false}).ok());
    CHECK(run.info(1).state == "draining");
    CHECK(run.info(3).state == "loading");  // waits for the drain
    run.run_until([&] { return !run.host->loading(); });
    CHECK(busy->finishes == 1);
    CHECK(busy->result.reason == actors::finish_reason::length);
    CHECK(run.info(3).state == "serving");
    CHECK_FALSE(run.info(1).resident);
    auto after = run.submit();
    run.run_until([&] { return after->finishes > 0; });
    CHECK(after->tokens == want2);
}

TEST_CASE("generation host: a failed --replace restores the drained generation with its resident bytes",
          "[generation_host]") {
    const auto want1 = solo_run(gen1());
    auto mutant = scratch_dir("generation-host-replace") / "pkg";   // gen2's weights, gen1's golden corpus
    fs::remove_all(mutant);
    fs::copy(gen2(), mutant, fs::copy_options::recursive);
    fs::copy_file(package_model_dir(gen1()) / "golden.jsonl", mutant / "reference-model" / "golden.jsonl",
                  fs::copy_options::overwrite_existing);
    // As above: one package fits the chip, two do not.
    host_run run(gen1(), {"device.sim.chips=1", "device.sim.dram_bytes_per_chip=375809638"});
    REQUIRE(run.host->load(engine::load_request{"m", mutant, true, false}).ok());
    run.run_until([&] { return !run.host->loading(); });
    CHECK(run.info(2).state == "failed");
    CHECK_THAT(run.info(2).reason, Catch::Contains("golden check"));
    CHECK(run.info(1).current);
    CHECK(run.info(1).resident);
    auto sink = run.submit();
    run.run_until([&] { return sink->finishes > 0; });
    CHECK(sink->tokens == want1);

    // The restored generation's bytes count again: a second package still does not fit beside it.
    REQUIRE(run.host->load(engine::load_request{"m", gen2(), false, false}).ok());
    CHECK_FALSE(run.host->loading());
    CHECK(run.info(3).state == "failed");
    CHECK_THAT(run.info(3).reason, Catch::Contains("does not fit"));
    CHECK(run.info(1).current);
}
