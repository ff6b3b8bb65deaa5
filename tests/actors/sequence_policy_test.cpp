// The per-sequence rules the BatchTick applies (actors/schedule_policy.hpp) and its
// phase tables (actors/batch_tick_actor.hpp), without any actor.
#include <catch2/catch.hpp>

#include "actors/batch_tick_actor.hpp"
#include "actors/schedule_policy.hpp"

using namespace calserve::actors;

TEST_CASE("fits_context: one rule for the door, the parameters and the KV pool", "[actors][schedule]") {
    REQUIRE(fits_context(4064, 32, 4096));
    REQUIRE(fits_context(4095, 1, 4096));       // a prompt leaving room for one token
    REQUIRE_FALSE(fits_context(4096, 1, 4096));  // a prompt filling the context
    REQUIRE_FALSE(fits_context(4064, 33, 4096));
    REQUIRE(fits_context(160, 0, 160));          // the pool: the whole sequence, nothing after it
    REQUIRE_FALSE(fits_context(1, 0, 0));
}

TEST_CASE("chainable table", "[actors][schedule]") {
    // enabled, in one decode job, device holds its KV, device draws; tokens_after, kv_tokens, prompt_len, max_tokens
    const chain_input ok{true, true, true, true, 60, 64, 50, 16};
    REQUIRE(chainable(ok));
    auto with = [&](auto change) {
        auto in = ok;
        change(in);
        return chainable(in);
    };
    REQUIRE_FALSE(with([](chain_input& in) { in.enabled = false; }));
    REQUIRE_FALSE(with([](chain_input& in) { in.in_one_decode_job = false; }));  // chained already, refused, prefill
    REQUIRE_FALSE(with([](chain_input& in) { in.device_holds_kv = false; }));     // its job re-prefills
    REQUIRE_FALSE(with([](chain_input& in) { in.device_draws = false; }));        // a grammar, host sampling
    REQUIRE(with([](chain_input& in) { in.tokens_after = 64; }));                 // the step fits the reservation
    REQUIRE_FALSE(with([](chain_input& in) { in.tokens_after = 65; }));           // ... or does not
    auto at = [&](std::int64_t tokens_after) {
        return with([&](chain_input& in) {
            in.kv_tokens = 100;
            in.tokens_after = tokens_after;
        });
    };
    REQUIRE(at(65));        // 15 generated once drawn: one more allowed
    REQUIRE_FALSE(at(66));  // max_tokens reached
}

TEST_CASE("needs_prefill table", "[actors][schedule]") {
    // in_job, job_is_prefill, device_holds_kv, pending_tokens
    REQUIRE(needs_prefill({true, true, true, 0}));       // its prefill job is in flight
    REQUIRE_FALSE(needs_prefill({true, false, true, 0}));  // a decode job holds it
    REQUIRE(needs_prefill({false, false, false, 1}));    // nothing on the device: re-prefill
    REQUIRE_FALSE(needs_prefill({false, false, true, 1}));  // one token to feed: a decode
    REQUIRE(needs_prefill({false, false, true, 2}));     // the next chunk of a long prompt
}

TEST_CASE("BatchTick phase tables", "[actors][schedule]") {
    // Chained decode is a phase: it leaves to one job (decode), or to decode_unchained when
    // the chained step came back unrun; ending while chained waits for both jobs.
    REQUIRE(is_legal(k_seq_table, seq_phase::decode, seq_phase::decode_chained));
    REQUIRE_FALSE(is_legal(k_seq_table, seq_phase::decode_unchained, seq_phase::decode_chained));
    REQUIRE_FALSE(is_legal(k_seq_table, seq_phase::decode_chained, seq_phase::awaiting));
    REQUIRE_FALSE(is_legal(k_seq_table, seq_phase::finishing_chained, seq_phase::released));
    for (auto p : {seq_phase::prefill, seq_phase::decode, seq_phase::decode_chained, seq_phase::decode_unchained,
                   seq_phase::verify, seq_phase::finishing_chained})
        REQUIRE_FALSE(is_legal(k_seq_table, p, seq_phase::released));
    REQUIRE(in_two_jobs(seq_phase::decode_chained));
    // A verify row is in one job and is never chained (its drafts come from its read tokens).
    REQUIRE(holds_job(seq_phase::verify));
    REQUIRE_FALSE(in_two_jobs(seq_phase::verify));
    REQUIRE_FALSE(is_legal(k_seq_table, seq_phase::verify, seq_phase::decode_chained));
    REQUIRE(is_legal(k_seq_table, seq_phase::verify, seq_phase::finishing_job));
    REQUIRE(holds_job(seq_phase::finishing_chained));
    // A cache hit's copy is a state of the device's copy: only a job makes it held.
    REQUIRE(is_legal(k_copy_table, device_copy::none, device_copy::copied));
    REQUIRE(is_legal(k_copy_table, device_copy::lost, device_copy::recopied));
    REQUIRE_FALSE(is_legal(k_copy_table, device_copy::copied, device_copy::shared));
    REQUIRE_FALSE(is_legal(k_copy_table, device_copy::none, device_copy::shared));
    REQUIRE_FALSE(device_holds(device_copy::copied));
    REQUIRE(device_holds(device_copy::shared));
}
