// N-gram prompt lookup: longest n first, newest occurrence with a full run, bounds.
#include <catch2/catch.hpp>

#include <vector>

#include "model/speculative/accept.hpp"
#include "model/speculative/drafter.hpp"

using namespace calserve::model::speculative;
using tokens = std::vector<calserve::model::token_id>;

TEST_CASE("ngram drafter proposes what followed the last n tokens") {
    ngram_drafter d({1, 3});
    // ... 5 6 7 8 9 ... 5 6 7 -> 8 9 (the 3-gram 5 6 7 matched)
    const tokens seq{1, 5, 6, 7, 8, 9, 2, 3, 5, 6, 7};
    CHECK(d.propose(seq, 2) == tokens{8, 9});
    CHECK(d.propose(seq, 1) == tokens{8});
    // The run is cut at the end of the context (8 9 2 3 5 6 7: 7 tokens follow).
    CHECK(d.propose(seq, 20) == tokens{8, 9, 2, 3, 5, 6, 7});
}

TEST_CASE("ngram drafter prefers the longest n, then the newest occurrence with a full run") {
    ngram_drafter d({1, 2});
    // Suffix "4 7": the 2-gram occurs once (-> 1); the 1-gram "7" occurs twice more recently.
    const tokens seq{4, 7, 1, 0, 7, 2, 0, 7, 3, 0, 4, 7};
    CHECK(d.propose(seq, 1) == tokens{1});
    ngram_drafter uni({1, 1});
    CHECK(uni.propose(seq, 1) == tokens{3});  // newest "7" before the suffix
    // A newest occurrence too close to the end for k tokens loses to an older full run.
    const tokens loop{9, 1, 2, 3, 4, 9, 1, 9};
    CHECK(uni.propose(loop, 3) == tokens{1, 2, 3});
    CHECK(uni.propose(loop, 2) == tokens{1, 9});  // the newest has a full run of 2
}

TEST_CASE("ngram drafter answers nothing without a match, a budget or a context") {
    ngram_drafter d({2, 3});
    CHECK(d.propose(tokens{1, 2, 3, 4, 5}, 4).empty());
    CHECK(d.propose(tokens{1, 2, 1, 2}, 0).empty());
    CHECK(d.propose(tokens{}, 4).empty());
    CHECK(d.propose(tokens{7}, 4).empty());
    CHECK(d.propose(tokens{1, 2, 1, 2}, 4) == tokens{1, 2});  // "1 2" -> what followed its first occurrence
}

TEST_CASE("ngram drafter searches only the newest window of a long context") {
    ngram_drafter d({1, 1});
    tokens seq{42, 43};  // the only earlier 42, followed by 43, lies outside the window
    seq.resize(static_cast<std::size_t>(k_ngram_window) + 10, 0);
    for (std::size_t i = 2; i < seq.size(); ++i) seq[i] = calserve::model::token_id(100 + i % 7);
    seq.push_back(42);
    CHECK(d.propose(seq, 1).empty());
}

TEST_CASE("drafters by method; method names") {
    CHECK(make_drafter({method::none, {}}) == nullptr);
    CHECK(make_drafter({method::ngram, {}}) != nullptr);
    method m = method::none;
    CHECK(parse_method("ngram", m));
    CHECK(m == method::ngram);
    CHECK(parse_method("none", m));
    CHECK(m == method::none);
    CHECK_FALSE(parse_method("eagle", m));
    CHECK(to_string(method::ngram) == "ngram");
}

TEST_CASE("a verify row emits the kept drafts and the draw, cut where plain decoding stops") {
    const tokens drafts{5, 6, 7, 8};
    const tokens no_stops{}, eos{7}, other{99};
    CHECK(emitted_tokens(drafts, 4, 9, 100, no_stops) == tokens{5, 6, 7, 8, 9});
    CHECK(emitted_tokens(drafts, 2, 3, 100, no_stops) == tokens{5, 6, 3});
    CHECK(emitted_tokens(drafts, 0, 3, 100, no_stops) == tokens{3});
    CHECK(emitted_tokens(drafts, 4, 9, 100, eos) == tokens{5, 6, 7});    // a stop id inside the kept run
    CHECK(emitted_tokens(drafts, 1, 7, 100, eos) == tokens{5, 7});       // the draw is the stop id
    CHECK(emitted_tokens(drafts, 4, 9, 100, other) == tokens{5, 6, 7, 8, 9});
    CHECK(emitted_tokens(drafts, 4, 9, 3, no_stops) == tokens{5, 6, 7});  // max_tokens mid-run
    CHECK(emitted_tokens(drafts, 9, 9, 100, no_stops).size() == 5);     // accepted clamped to the drafts
    CHECK(kept_positions(10, 2) == 13);
}
