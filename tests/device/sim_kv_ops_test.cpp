// The KV sequence operations (docs/device.md "KV sequence operations"): seq copy
// and seq keep on the simulated device, priced by the latency model, with a fault
// point; add/div/state/shift answer unsupported.
#include <catch2/catch.hpp>

#include "device/sim/latency_model.hpp"
#include "sim_fixture.hpp"

using namespace calserve;
using namespace calserve::device;
using namespace std::chrono_literals;
using test::k_decode;
using test::k_prefill;

namespace {
void prefill(test::sim_fixture& f, seq_id seq, const std::vector<std::int32_t>& tokens, slot s = slot::ping) {
    auto j = f.submit(k_prefill, s, seq, tokens);
    REQUIRE(j.ok());
    REQUIRE(f.dev->wait(*j, 1s).ok());
}
}  // namespace

TEST_CASE("kv_copy: the copy continues exactly as the source's prefix would", "[device][kv]") {
    test::sim_fixture f;
    const std::vector<std::int32_t> prompt{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3};
    REQUIRE(f.dev->kv_allocate(1, 32).ok());
    prefill(f, 1, prompt);
    REQUIRE(f.dev->kv_allocate(2, 32).ok());
    const auto used_before = f.dev->kv().blocks_used;
    REQUIRE(f.dev->kv_copy(1, 2, 16).ok());
    CHECK(f.dev->kv_length(2) == 16);
    CHECK(f.dev->kv_length(1) == std::int64_t(prompt.size()));  // the source is unchanged
    CHECK(f.dev->kv().blocks_used >= used_before);
    // Resume the copy with different tokens: its numbers are those of the copied prefix + them.
    auto j = f.submit(k_prefill, slot::pong, 2, {7, 7});
    REQUIRE(j.ok());
    REQUIRE(f.dev->wait(*j, 1s).ok());
    std::vector<std::int32_t> expected(prompt.begin(), prompt.begin() + 16);
    expected.insert(expected.end(), {7, 7});
    CHECK(f.logits(k_prefill, slot::pong) == test::expected_logits(expected));
    // And the source still continues its own history.
    j = f.submit(k_decode, slot::ping, 1, {4});
    REQUIRE(j.ok());
    REQUIRE(f.dev->wait(*j, 1s).ok());
    auto own = prompt;
    own.push_back(4);
    CHECK(f.logits(k_decode, slot::ping) == test::expected_logits(own));
}

TEST_CASE("kv_copy refuses what it cannot do, leaving the destination empty", "[device][kv]") {
    test::sim_fixture f;
    REQUIRE(f.dev->kv_allocate(1, 32).ok());
    prefill(f, 1, {1, 2, 3, 4});
    REQUIRE(f.dev->kv_allocate(2, 32).ok());
    CHECK(f.dev->kv_copy(1, 2, 5).code() == status::invalid_argument);   // past the source
    CHECK(f.dev->kv_copy(1, 2, 0).code() == status::invalid_argument);
    CHECK(f.dev->kv_copy(1, 1, 2).code() == status::invalid_argument);   // onto itself
    CHECK(f.dev->kv_copy(9, 2, 2).code() == status::unknown_sequence);
    CHECK(f.dev->kv_copy(1, 9, 2).code() == status::unknown_sequence);   // destination not allocated
    REQUIRE(f.dev->kv_copy(1, 2, 2).ok());
    CHECK(f.dev->kv_copy(1, 2, 2).code() == status::invalid_argument);   // destination not empty
    // The fault point: kv_full, nothing copied.
    REQUIRE(f.dev->kv_allocate(3, 32).ok());
    fault_spec once;
    once.point = fault_point::kv_copy_fail;
    once.mode = arm_mode::once;
    REQUIRE(f.dev->faults().arm(once).ok());
    CHECK(f.dev->kv_copy(1, 3, 4).code() == status::kv_full);
    CHECK(f.dev->kv_length(3) == 0);
    CHECK(f.dev->faults().fires(fault_point::kv_copy_fail) == 1);
    CHECK(f.dev->kv_copy(1, 3, 4).ok());
}

TEST_CASE("kv_copy is priced as DRAM traffic on the compute engine", "[device][kv]") {
    test::sim_fixture f(10.0, 2.0);
    REQUIRE(f.dev->kv_allocate(1, 64).ok());
    prefill(f, 1, std::vector<std::int32_t>(40, 1));
    REQUIRE(f.dev->kv_allocate(2, 64).ok());
    const auto busy = f.dev->compute_busy_ns();
    REQUIRE(f.dev->kv_copy(1, 2, 32).ok());
    const double ms = f.dev->latency()->kv_copy_ms(32);
    CHECK(ms > 0);
    CHECK(f.dev->compute_busy_ns() - busy == std::int64_t(ms * 1e6));
    // 2 x bytes / DRAM bandwidth: bytes_per_token x tokens, read and written.
    const auto& spec = f.dev->package();
    CHECK(ms == Approx(2.0 * double(spec.kv.bytes_per_token()) * 32 / (200e9) * 1e3));
}

TEST_CASE("kv_keep truncates a sequence and returns the blocks past it", "[device][kv]") {
    test::sim_fixture f;
    REQUIRE(f.dev->kv_allocate(1, 64).ok());
    prefill(f, 1, std::vector<std::int32_t>(40, 2));
    const auto used = f.dev->kv().blocks_used;  // 16-token blocks: 4 reserved
    REQUIRE(f.dev->kv_keep(1, 16).ok());
    CHECK(f.dev->kv_length(1) == 16);
    CHECK(f.dev->kv().blocks_used == used - 3);
    CHECK(f.dev->kv_keep(1, 17).code() == status::invalid_argument);
    CHECK(f.dev->kv_keep(5, 1).code() == status::unknown_sequence);
    REQUIRE(f.dev->kv_apply(1, 17, 1s).ok());  // the kept block is full: the next token needs one more
    auto j = f.submit(k_decode, slot::ping, 1, {6});
    REQUIRE(j.ok());
    REQUIRE(f.dev->wait(*j, 1s).ok());
    std::vector<std::int32_t> h(16, 2);
    h.push_back(6);
    CHECK(f.logits(k_decode, slot::ping) == test::expected_logits(h));
}

TEST_CASE("add, div, state and context shift answer unsupported, naming the operation", "[device][kv]") {
    test::sim_fixture f;
    for (auto op : {kv_seq_op::add, kv_seq_op::div, kv_seq_op::state, kv_seq_op::shift}) {
        auto r = f.dev->kv_sequence_op_unsupported(op);
        REQUIRE_FALSE(r.ok());
        CHECK(r.code() == status::unsupported);
        CHECK(r.error().what().find(std::string(to_string(op))) != std::string::npos);
    }
}
