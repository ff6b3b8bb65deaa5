// The device's view of a package with decode batch profiles: package_spec_from lists every
// decode submodel (batch-1 first), spec.batch is the largest profile, kv.slots the sequences
// of full context the KV region holds; what the device cannot represent is refused.
#include <catch2/catch.hpp>

#include <span>

#include "device/device.hpp"
#include "device/package_spec.hpp"
#include "model/package/pack.hpp"
#include "tests/support/test_paths.hpp"

using namespace calserve;
using namespace calserve::device;
namespace mp = calserve::model::package;

namespace {
const std::filesystem::path& tiny_moe_package() {
    static const std::filesystem::path dir = [] {
        mp::pack_options po;
        po.preset = "tiny-moe-2chip";
        po.out = test::scratch_dir("device-profiles") / "pkg";
        po.tokenizer_dir = test::tokenizer_dir();
        auto p = mp::pack(po);
        REQUIRE(p.ok());
        return p->root;
    }();
    return dir;
}

mp::package loaded() {
    auto p = mp::load_package(tiny_moe_package());
    REQUIRE(p.ok());
    return *p;
}

mp::submodel& profile(mp::package& p, std::uint32_t batch) {
    for (auto& m : p.submodels)
        if (m.role == mp::submodel_role::decode && m.batch == batch) return m;
    FAIL("no decode profile of batch " << batch);
    return p.submodels.front();  // not reached: FAIL throws
}
}  // namespace

TEST_CASE("package_spec lists every decode profile with [B,1] inputs, [B,1,vocab] logits and disjoint buffers") {
    auto spec = package_spec_from_dir(tiny_moe_package());
    REQUIRE(spec.ok());
    CHECK(spec->batch == 16);
    CHECK(spec->kv.slots == 16);
    CHECK(spec->kv.capacity_tokens() == 16 * 4096);
    REQUIRE(spec->submodels.size() == 6);
    CHECK(spec->submodels[0].kind == submodel_kind::prefill);
    CHECK(spec->submodels[0].batch == 1);
    REQUIRE(spec->first_of(submodel_kind::decode) != nullptr);
    CHECK(spec->first_of(submodel_kind::decode)->batch == 1);
    std::vector<std::pair<std::uint64_t, std::uint64_t>> profile_buffers;  // batch > 1 only
    const std::int64_t batches[] = {1, 2, 4, 8, 16};
    for (std::size_t i = 0; i < 5; ++i) {
        const auto& d = spec->submodels[i + 1];
        const std::int64_t b = batches[i];
        INFO(d.name);
        CHECK(d.kind == submodel_kind::decode);
        CHECK(d.name == "tiny_moe_decode_b" + std::to_string(b) + "_c4096");
        CHECK(spec->find(d.name) == &d);
        CHECK(d.batch == b);
        CHECK(d.max_tokens == 1);
        // token, position, and the sampling head's sample_params and draft_tokens (the tiny presets pack a head).
        REQUIRE(d.inputs.size() == 4);
        CHECK(d.inputs[2].name == "sample_params");
        CHECK(d.inputs[2].shape == std::vector<std::int64_t>{b, 16});
        CHECK(d.inputs[3].name == "draft_tokens");
        CHECK(d.inputs[3].shape == std::vector<std::int64_t>{b, 7});
        CHECK(d.head_k == 64);
        CHECK(d.inputs[0].name == "token");
        CHECK(d.inputs[0].shape == std::vector<std::int64_t>{b, 1});
        CHECK(d.inputs[0].type == dtype::int32);
        CHECK(d.inputs[1].shape == std::vector<std::int64_t>{b, 1});
        REQUIRE(d.outputs.size() == 7);  // logits, then sampled, rng_state, topk_logits, topk_ids, lse, accepted
        CHECK(d.outputs[6].name == "accepted");
        CHECK(d.outputs[1].name == "sampled");
        CHECK(d.outputs[1].bytes == std::uint64_t(4 * b));
        CHECK(d.outputs[3].shape == std::vector<std::int64_t>{b, 64});
        CHECK(d.outputs[0].shape == std::vector<std::int64_t>{b, 1, spec->vocab_size});
        CHECK(d.outputs[0].type == dtype::bf16);
        REQUIRE(d.csrs.size() == 2);
        CHECK(d.csrs[0].offset == 0x1104);
        CHECK(d.csrs[1].offset == 0x1144);
        if (b == 1) continue;
        for (const auto& t : d.inputs) profile_buffers.insert(profile_buffers.end(), {{t.ping_address, t.bytes}, {t.pong_address, t.bytes}});
        for (const auto& t : d.outputs) profile_buffers.insert(profile_buffers.end(), {{t.ping_address, t.bytes}, {t.pong_address, t.bytes}});
    }
    for (std::size_t i = 0; i < profile_buffers.size(); ++i)
        for (std::size_t j = i + 1; j < profile_buffers.size(); ++j) {
            const auto& [a, as] = profile_buffers[i];
            const auto& [b, bs] = profile_buffers[j];
            CHECK((a + as <= b || b + bs <= a));
        }
}

TEST_CASE("package_spec refuses profiles the device cannot represent") {
    SECTION("a batch-2 prefill") {
        auto p = loaded();
        p.submodels.front().batch = 2;
        CHECK(package_spec_from(p).code() == status::unsupported);
    }
    SECTION("a decode profile above 16 rows") {
        auto p = loaded();
        profile(p, 16).batch = 32;
        p.batch = 32;
        CHECK(package_spec_from(p).code() == status::unsupported);
    }
    SECTION("token [2,1] in a batch-4 profile") {
        auto p = loaded();
        auto& token = profile(p, 4).inputs.front();
        token.shape = {2, 1};
        token.byte_size = 8;
        CHECK(package_spec_from(p).code() == status::shape_mismatch);
    }
    SECTION("logits of one row in a batch-8 profile") {
        auto p = loaded();
        auto& logits = profile(p, 8).outputs.front();
        logits.shape = {1, 1, p.vocab};
        logits.byte_size = std::uint64_t{p.vocab} * 2;
        CHECK(package_spec_from(p).code() == status::shape_mismatch);
    }
    SECTION("a manifest batch that is not the largest profile") {
        auto p = loaded();
        p.batch = 8;
        CHECK(package_spec_from(p).code() == status::package_invalid);
    }
}

TEST_CASE("check_logits_bf16 finds every Inf and NaN, at any position, and only those", "[device][logits]") {
    // Edge encodings: largest finite, smallest normal/subnormal, zeros, both infinities, quiet and signalling NaNs.
    const std::vector<std::uint16_t> finite = {0x0000, 0x8000, 0x0001, 0x0080, 0x3f80, 0xbf80, 0x7f7f, 0xff7f, 0x7f00};
    const std::vector<std::uint16_t> bad = {0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7f81, 0xffff};
    for (std::size_t n : {std::size_t(1), std::size_t(3), std::size_t(4), std::size_t(5), std::size_t(8191),
                          std::size_t(8192), std::size_t(8193), std::size_t(20011)}) {
        std::vector<std::uint16_t> v(n);
        for (std::size_t i = 0; i < n; ++i) v[i] = finite[i % finite.size()];
        auto bytes = std::as_bytes(std::span(v));
        REQUIRE(check_logits_bf16(bytes).ok());
        for (std::size_t at : {std::size_t(0), n / 2, n - 1}) {
            for (auto b : bad) {
                auto w = v;
                w[at] = b;
                auto wb = std::as_bytes(std::span(w));
                auto r = check_logits_bf16(wb);
                INFO("n=" << n << " at=" << at << " value=" << b);
                REQUIRE(r.code() == status::logits_nan);
                REQUIRE(r.error().what() == "logits_nan: logit " + std::to_string(at) + " is not finite");
            }
        }
    }
}
