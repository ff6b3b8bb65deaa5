// The manifest's `placement` (docs/package-format.md "Placement"): `pack --placement`
// writes it, the loader reads it (absent = tp, so every older package stays valid), the
// validator checks it against the chips, layers and experts, and the packer refuses what
// the validator would.
#include <catch2/catch.hpp>

#include "model/package/validate.hpp"
#include "tests/model/package_test_support.hpp"

namespace mp = calserve::model::package;
namespace tp = calserve::test::pkg;
namespace fs = std::filesystem;

namespace {

mp::pack_options options(const std::string& preset, const std::string& placement, const std::string& tag) {
    mp::pack_options o;
    o.preset = preset;
    o.out = calserve::test::scratch_dir(tag) / "pkg";
    o.seed = 7;
    o.tokenizer_dir = calserve::test::tokenizer_dir();
    o.placement = placement;
    return o;
}

// Names the placement in a copy's manifest (the manifest is not in its own inventory).
fs::path with_placement(const fs::path& base, const std::string& value, const std::string& tag) {
    const auto dir = tp::clone(base, tag);
    tp::edit(dir, "calserve-manifest.json", "\"kind\": \"calserve-manifest\"",
             "\"placement\": \"" + value + "\", \"kind\": \"calserve-manifest\"");
    return dir;
}

}  // namespace

TEST_CASE("pack --placement: the manifest names ep and pp, tp stays unwritten, the validator passes all three") {
    for (const std::string placement : {"tp", "ep", "pp"}) {
        auto p = mp::pack(options("tiny-moe-2chip", placement, "pkg-placement-" + placement));
        INFO(placement << ": " << (p.ok() ? std::string() : p.error().what()));
        REQUIRE(p.ok());
        const auto manifest = tp::slurp(p->root / "calserve-manifest.json");
        CHECK((manifest.find("\"placement\"") != std::string::npos) == (placement != "tp"));
        auto loaded = mp::load_package(p->root);
        REQUIRE(loaded.ok());
        CHECK(loaded->placement == placement);
        auto r = mp::validate_package(p->root, {});
        REQUIRE(r.ok());
        INFO(r->to_json());
        CHECK(r->status != "fail");
        CHECK_FALSE(r->has("D_PLACEMENT_UNKNOWN"));
        CHECK_FALSE(r->has("D_PLACEMENT_INCONSISTENT"));
        tp::remove_scratch(p->root);
    }
}

TEST_CASE("pack --placement refuses what the shape does not allow, naming the field") {
    auto dense_ep = mp::pack(options("tiny-dense-1chip", "ep", "pkg-placement-dense-ep"));
    REQUIRE_FALSE(dense_ep.ok());
    CHECK(dense_ep.code() == calserve::status::invalid_argument);
    CHECK(dense_ep.error().message.find("placement 'ep'") != std::string::npos);
    auto one_chip_pp = mp::pack(options("tiny-dense-1chip", "pp", "pkg-placement-dense-pp"));
    REQUIRE_FALSE(one_chip_pp.ok());
    CHECK(one_chip_pp.error().message.find("two chips") != std::string::npos);
    auto unknown = mp::pack(options("tiny-moe-2chip", "dp", "pkg-placement-dp"));
    REQUIRE_FALSE(unknown.ok());
    CHECK(unknown.error().message.find("unknown") != std::string::npos);
}

TEST_CASE("check_placement: experts divisible by chips, a layer per stage") {
    CHECK(mp::check_placement("tp", 1, 1, 0).ok());
    CHECK(mp::check_placement("ep", 2, 48, 128).ok());
    CHECK_FALSE(mp::check_placement("ep", 2, 48, 0).ok());
    CHECK_FALSE(mp::check_placement("ep", 3, 48, 128).ok());  // 128 experts over 3 chips
    CHECK(mp::check_placement("pp", 2, 2, 0).ok());
    CHECK_FALSE(mp::check_placement("pp", 4, 3, 0).ok());     // 3 layers, 4 stages
    CHECK_FALSE(mp::check_placement("ep", 1, 48, 128).ok());
    CHECK_FALSE(mp::check_placement("", 2, 48, 128).ok());
}

TEST_CASE("validator: an unknown or inconsistent manifest placement is a finding naming the field") {
    const auto moe = tp::pack_preset("tiny-moe-2chip", "pkg-placement-base-moe");
    const auto dense = tp::pack_preset("tiny-dense-1chip", "pkg-placement-base-dense");
    struct mutant {
        fs::path base;
        std::string value, code;
    };
    for (const auto& m : {mutant{moe, "dp", "D_PLACEMENT_UNKNOWN"}, mutant{dense, "ep", "D_PLACEMENT_INCONSISTENT"},
                          mutant{dense, "pp", "D_PLACEMENT_INCONSISTENT"}}) {
        const auto dir = with_placement(m.base, m.value, "pkg-placement-mutant");
        auto loaded = mp::load_package(dir);  // the loader keeps what it read; the validator judges it
        REQUIRE(loaded.ok());
        CHECK(loaded->placement == m.value);
        auto r = mp::validate_package(dir, {});
        REQUIRE(r.ok());
        INFO(m.value << ": " << r->to_json());
        CHECK(r->status == "fail");
        CHECK(r->has(m.code));
        CHECK(r->to_json().find("placement '" + m.value + "'") != std::string::npos);
        tp::remove_scratch(dir);
    }
    // An MoE model whose experts do not divide over its chips.
    auto dir = with_placement(moe, "ep", "pkg-placement-mutant");
    tp::edit(dir, "__Tokenizer/config.json", "\"num_experts\":8", "\"num_experts\":7");
    auto r = mp::validate_package(dir, {});
    REQUIRE(r.ok());
    INFO(r->to_json());
    CHECK(r->has("D_PLACEMENT_INCONSISTENT"));
    tp::remove_scratch(dir);
    tp::remove_scratch(moe);
    tp::remove_scratch(dense);
}
