// Board placement of several packages (model/package/placement.hpp) and the golden
// corpus gate (model/package/golden_corpus.hpp).
#include <catch2/catch.hpp>
#include <fstream>

#include "model/package/golden_corpus.hpp"
#include "model/package/package.hpp"
#include "model/package/placement.hpp"
#include "tests/model/package_test_support.hpp"

namespace mp = calserve::model::package;
namespace tp = calserve::test::pkg;
namespace fs = std::filesystem;

namespace {
const mp::package& tiny() {
    static const mp::package p = [] {
        auto loaded = mp::load_package(tp::pack_preset("tiny-dense-1chip", "placement-tiny"));
        REQUIRE(loaded.ok());
        return *loaded;
    }();
    return p;
}
}  // namespace

TEST_CASE("placement: first fit fills chips in order, the guard counts once per chip", "[placement]") {
    const auto need = mp::package_chip_bytes(tiny(), {});
    REQUIRE(need.size() == 1);
    mp::capacity_limits l;
    l.guard_bytes = 1000;
    l.dram_bytes_per_chip = l.guard_bytes + 2 * need[0];  // two per chip
    std::vector<mp::placement_request> r{{"a", &tiny(), {}}, {"b", &tiny(), {}}, {"c", &tiny(), {}}};
    auto placed = mp::place_packages(r, 2, l);
    REQUIRE(placed.fits);
    CHECK(placed.models[0].chips == std::vector<std::uint32_t>{0});
    CHECK(placed.models[1].chips == std::vector<std::uint32_t>{0});
    CHECK(placed.models[2].chips == std::vector<std::uint32_t>{1});
    CHECK(placed.used[0] == l.guard_bytes + 2 * need[0]);
    CHECK(placed.used[1] == l.guard_bytes + need[0]);
}

TEST_CASE("placement: named chips, resident bytes and a set that does not fit", "[placement]") {
    const auto need = mp::package_chip_bytes(tiny(), {})[0];
    mp::capacity_limits l;
    l.guard_bytes = 1000;
    l.dram_bytes_per_chip = l.guard_bytes + need;  // one per chip
    SECTION("named") {
        std::vector<mp::placement_request> r{{"a", &tiny(), {1}}, {"b", &tiny(), {}}};
        auto placed = mp::place_packages(r, 2, l);
        REQUIRE(placed.fits);
        CHECK(placed.models[0].chips == std::vector<std::uint32_t>{1});
        CHECK(placed.models[1].chips == std::vector<std::uint32_t>{0});
    }
    SECTION("three on two chips: refused, with the per-chip plan") {
        std::vector<mp::placement_request> r{{"a", &tiny(), {}}, {"b", &tiny(), {}}, {"c", &tiny(), {}}};
        auto placed = mp::place_packages(r, 2, l);
        CHECK_FALSE(placed.fits);
        CHECK(placed.models[2].chips.empty());
        CHECK_THAT(placed.plan, Catch::Contains("chip 0: guard") && Catch::Contains("chip 1: guard") &&
                                    Catch::Contains("c: needs 1 chip(s)"));
    }
    SECTION("resident bytes count against the chip") {
        std::vector<std::uint64_t> resident{need, 0};
        std::vector<mp::placement_request> r{{"a", &tiny(), {}}};
        auto placed = mp::place_packages(r, 2, l, resident);
        REQUIRE(placed.fits);
        CHECK(placed.models[0].chips == std::vector<std::uint32_t>{1});
        std::vector<mp::placement_request> named{{"a", &tiny(), {0}}};
        auto over = mp::place_packages(named, 2, l, resident);
        CHECK_FALSE(over.fits);
        CHECK_THAT(over.plan, Catch::Contains("a: does not fit on the chips it names"));
    }
    SECTION("a chip list of the wrong length") {
        std::vector<mp::placement_request> r{{"a", &tiny(), {0, 1}}};
        auto placed = mp::place_packages(r, 2, l);
        CHECK_FALSE(placed.fits);
        CHECK_THAT(placed.plan, Catch::Contains("names 2 chips, the package needs 1"));
    }
}

TEST_CASE("placement: chip lists", "[placement]") {
    CHECK(mp::parse_chip_list("", 2)->empty());
    CHECK(*mp::parse_chip_list("1", 2) == std::vector<std::uint32_t>{1});
    CHECK(*mp::parse_chip_list("0,1", 2) == std::vector<std::uint32_t>{0, 1});
    CHECK_FALSE(mp::parse_chip_list("2", 2).ok());
    CHECK_FALSE(mp::parse_chip_list("0,0", 2).ok());
    CHECK_FALSE(mp::parse_chip_list("x", 2).ok());
    CHECK_FALSE(mp::parse_chip_list("0,", 2).ok());
}

TEST_CASE("golden corpus: pack writes it, exact match, a near tie forgiven, a real mismatch refused", "[golden]") {
    auto corpus = mp::read_golden_corpus(tiny().reference_model_dir / mp::k_golden_corpus_file);
    REQUIRE(corpus.ok());
    REQUIRE(corpus->size() == 3);
    for (const auto& e : *corpus) {
        CHECK(e.arith == calserve::model::arithmetic::fp32);  // the simulator's mode
        CHECK(e.tokens.size() == 12);
        CHECK(e.top.size() == e.tokens.size());
        CHECK(e.top.front().front().first == e.tokens.front());
    }
    std::vector<std::vector<std::int32_t>> served;
    for (const auto& e : *corpus) served.push_back(e.tokens);
    auto exact = mp::compare_golden(*corpus, served);
    CHECK(exact.ok);
    CHECK(exact.compared == 36);
    CHECK(exact.ties == 0);

    std::vector<mp::golden_entry> tie{{{1}, {10, 11}, {{{10, 5.0f}, {20, 5.0f - 0.001f}}, {{11, 3.0f}}}}};
    auto forgiven = mp::compare_golden(tie, {{20, 99}});  // a near tie at step 0: the rest is not compared
    CHECK(forgiven.ok);
    CHECK(forgiven.ties == 1);
    auto refused = mp::compare_golden(tie, {{10, 12}});
    CHECK_FALSE(refused.ok);
    CHECK_THAT(refused.reason, Catch::Contains("entry 0 step 1: expected token 11, served 12"));
    std::vector<mp::golden_entry> far{{{1}, {10}, {{{10, 5.0f}, {20, 4.0f}}}}};
    CHECK_FALSE(mp::compare_golden(far, {{20}}).ok);
    CHECK_FALSE(mp::compare_golden(far, {{}}).ok);  // too short
}

TEST_CASE("golden corpus: round trip and malformed files", "[golden]") {
    auto dir = calserve::test::scratch_dir("golden-io");
    std::vector<mp::golden_entry> c{{{1, 2}, {3, 4}, {{{3, 1.5f}}, {{4, 2.5f}}}}};
    REQUIRE(mp::write_golden_corpus(dir / "g.jsonl", c).ok());
    auto back = mp::read_golden_corpus(dir / "g.jsonl");
    REQUIRE(back.ok());
    CHECK(back->at(0).prompt == c[0].prompt);
    CHECK(back->at(0).tokens == c[0].tokens);
    CHECK(back->at(0).top[1][0].second == 2.5f);
    CHECK(back->at(0).arith == calserve::model::arithmetic::fp32);
    c[0].arith = calserve::model::arithmetic::bf16;
    REQUIRE(mp::write_golden_corpus(dir / "g16.jsonl", c).ok());
    CHECK(mp::read_golden_corpus(dir / "g16.jsonl")->at(0).arith == calserve::model::arithmetic::bf16);
    // A line from before lines named their mode is FP32 (pack's only mode then); an
    // unknown mode is refused.
    std::ofstream(dir / "old.jsonl") << "{\"prompt\":[1],\"tokens\":[2]}\n";
    auto old = mp::read_golden_corpus(dir / "old.jsonl");
    REQUIRE(old.ok());
    CHECK(old->at(0).arith == calserve::model::arithmetic::fp32);
    for (const char* line : {"{\"arithmetic\":\"fp16\",\"prompt\":[1],\"tokens\":[2]}", "{\"arithmetic\":3,\"prompt\":[1],\"tokens\":[2]}"}) {
        std::ofstream(dir / "nomode.jsonl") << line << "\n";
        auto nomode = mp::read_golden_corpus(dir / "nomode.jsonl");
        REQUIRE_FALSE(nomode.ok());
        CHECK_THAT(nomode.error().message, Catch::Contains("arithmetic"));
    }
    std::ofstream(dir / "bad.jsonl") << "{\"arithmetic\":\"fp32\",\"prompt\":[1],\"tokens\":[2]}\nnot json\n";
    auto bad = mp::read_golden_corpus(dir / "bad.jsonl");
    REQUIRE_FALSE(bad.ok());
    CHECK_THAT(bad.error().message, Catch::Contains("line 2"));
    CHECK_FALSE(mp::read_golden_corpus(dir / "missing.jsonl").ok());
    std::ofstream(dir / "empty.jsonl") << "\n";
    CHECK_FALSE(mp::read_golden_corpus(dir / "empty.jsonl").ok());
}

TEST_CASE("golden corpus: checked only against a device of its arithmetic mode", "[golden]") {
    using calserve::model::arithmetic;
    std::vector<mp::golden_entry> fp32{{{1}, {2}, {}}}, bf16{{{1}, {2}, {}, arithmetic::bf16}};
    CHECK(mp::check_golden_arithmetic(fp32, "fp32").ok());
    CHECK(mp::check_golden_arithmetic(bf16, "bf16").ok());
    CHECK(mp::check_golden_arithmetic(fp32, "").ok());  // a device that does not say
    auto refused = mp::check_golden_arithmetic(fp32, "bf16");
    REQUIRE_FALSE(refused.ok());
    CHECK_THAT(refused.error().message, Catch::Contains("computed in fp32 arithmetic, the device computes in bf16"));
    CHECK_FALSE(mp::check_golden_arithmetic(bf16, "fp32").ok());
    auto mixed = fp32;
    mixed.push_back(bf16[0]);
    CHECK_FALSE(mp::check_golden_arithmetic(mixed, "fp32").ok());
}
