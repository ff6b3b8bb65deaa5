// One owner of a sequence's KV on the device: whatever the prefix cache setting, every
// da_kv_copy, da_kv_keep and da_kv_free the DeviceActor receives comes from the
// KvManager, and each released or preempted sequence is freed there once.
#include <catch2/catch.hpp>
#include <map>
#include <string>

#include "actors/batch_tick_actor.hpp"
#include "actors/kv_manager_actor.hpp"
#include "tests/actors/engine_fixture.hpp"

using namespace calserve;
using namespace calserve::actors;
using calserve::test::engine_harness;
using calserve::test::recording_sink;

TEST_CASE("only the KvManager sends KV operations to the device, with the cache on or off", "[engine][kv]") {
    const bool cache = GENERATE(false, true);
    INFO("prefix cache " << cache);
    // 16-token blocks, 12 in all: eight sequences of up to 70 tokens preempt one another.
    engine_harness h({"runtime.max_batch=8", "device.sim.kv_block_tokens=16", "runtime.kv_blocks=12",
                      "runtime.kv_step_tokens=16", "runtime.prefix_cache_block=16",
                      std::string("runtime.prefix_cache=") + (cache ? "true" : "false"), "log.level=warn"});
    std::map<std::string, std::map<std::string, int>> kv_ops;  // type -> sender -> count
    h.rt.set_delivery_hook([&](const delivery& d) {
        if (d.to_name == "device" && d.type.starts_with("da_kv_")) ++kv_ops[std::string(d.type)][std::string(d.from_name)];
    });
    std::vector<std::shared_ptr<recording_sink>> sinks;
    const auto shared_start = calserve::test::random_prompt(900, 32);
    for (int i = 0; i < 8; ++i) {
        auto prompt = shared_start;  // whole cache blocks in common: copies when the cache is on
        auto tail = calserve::test::random_prompt(910 + i, 4 + i);
        prompt.insert(prompt.end(), tail.begin(), tail.end());
        sinks.push_back(std::make_shared<recording_sink>());
        REQUIRE(h.engine->submit(h.greedy("k" + std::to_string(i), prompt, 30 + i), sinks.back()).ok());
    }
    h.run_until_done();
    h.rt.set_delivery_hook({});
    for (auto& s : sinks) REQUIRE(s->finishes == 1);
    CHECK(h.engine->batch_tick().preemptions() > 0);
    REQUIRE(kv_ops["da_kv_free"]["kv_manager"] > 0);
    for (const auto& [type, senders] : kv_ops) {
        INFO(type);
        for (const auto& [sender, n] : senders) {
            INFO(sender << " sent " << n);
            CHECK(sender == "kv_manager");
        }
    }
    // Without the cache nothing is kept: each sequence's KV, freed once per release or
    // preemption, and never twice for one preemption.
    if (!cache)
        CHECK(kv_ops["da_kv_free"]["kv_manager"] ==
              int(sinks.size()) + int(h.engine->batch_tick().preemptions()));
    CHECK(h.engine->kv_manager().pool().reserved_blocks() == 0);
    CHECK(h.engine->kv_manager().pool().conserved());
    CHECK(h.rt.failures().empty());
}
