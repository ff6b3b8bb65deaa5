// safetensors: round trip, every class of corruption gives a clear error, dtypes, shards.
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>

#include "model/weights/safetensors.hpp"
#include "model/weights/weights.hpp"
#include "tests/model/transformer_fixture.hpp"

using namespace calserve;

namespace {

std::string read_all(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const std::filesystem::path& p, const std::string& s) {
    std::ofstream(p, std::ios::binary | std::ios::trunc) << s;
}

// A raw file: 8-byte length + header text + data bytes.
std::string raw(const std::string& header, std::size_t data_bytes, std::uint64_t len_override = 0) {
    std::uint64_t len = len_override ? len_override : header.size();
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((len >> (8 * i)) & 0xff);
    return out + header + std::string(data_bytes, '\x01');
}

error_info load_error(const std::filesystem::path& p) {
    auto r = model::load_safetensors(p);
    REQUIRE_FALSE(r.ok());
    return r.error();
}

}  // namespace

TEST_CASE("safetensors round trip keeps names, dtypes, shapes and bytes") {
    auto dir = test::scratch_dir("st-roundtrip");
    std::vector<float> a{1, 2, 3, 4, 5, 6};
    std::vector<std::uint16_t> b{0x3f80, 0x4000, 0xc040};
    std::vector<model::tensor_to_write> t{{"a", model::dtype::f32, {2, 3}, std::as_bytes(std::span(a))},
                                          {"b", model::dtype::bf16, {3}, std::as_bytes(std::span(b))}};
    REQUIRE(model::write_safetensors(dir / "x.safetensors", t).ok());
    auto f = model::load_safetensors(dir / "x.safetensors");
    REQUIRE(f.ok());
    REQUIRE(f->header.tensors.size() == 2);
    CHECK(f->header.data_offset % 8 == 0);
    const auto& ta = f->header.tensors[0];
    CHECK(ta.name == "a");
    CHECK(ta.shape == std::vector<std::int64_t>{2, 3});
    CHECK(std::memcmp(f->tensor_data(ta), a.data(), 24) == 0);
    CHECK(f->header.tensors[1].type == model::dtype::bf16);
}

TEST_CASE("a loaded data region starts on a cache line, so 64-byte tensor offsets stay aligned") {
    // Large enough that the allocator would hand out a 16-byte-aligned mapping.
    auto dir = test::scratch_dir("st-aligned");
    std::vector<float> a(64 * 1024, 1.0f), b(16, 2.0f), c(32, 3.0f);
    std::vector<model::tensor_to_write> t{{"a", model::dtype::f32, {64, 1024}, std::as_bytes(std::span(a))},
                                          {"b", model::dtype::f32, {16}, std::as_bytes(std::span(b))},
                                          {"c", model::dtype::f32, {32}, std::as_bytes(std::span(c))}};
    REQUIRE(model::write_safetensors(dir / "x.safetensors", t).ok());
    auto f = model::load_safetensors(dir / "x.safetensors");
    REQUIRE(f.ok());
    for (const auto& ti : f->header.tensors) {
        INFO(ti.name);
        CHECK(reinterpret_cast<std::uintptr_t>(f->tensor_data(ti)) % model::k_simd_alignment == 0);
    }
    model::simd_vector<float> v(1000);
    CHECK(reinterpret_cast<std::uintptr_t>(v.data()) % model::k_simd_alignment == 0);
    // Weight-sized regions start on a huge page (so transparent huge pages can back all of them).
    auto big = model::make_aligned_bytes(3 * model::k_huge_page + 100);
    CHECK(reinterpret_cast<std::uintptr_t>(big.get()) % model::k_huge_page == 0);
    auto small = model::make_aligned_bytes(0);
    CHECK(small != nullptr);
}

TEST_CASE("corrupted or truncated safetensors files give clear errors") {
    auto dir = test::scratch_dir("st-corrupt");
    const std::string good = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
    auto p = dir / "m.safetensors";
    struct bad_case {
        std::string name, bytes, expect;
    };
    const std::vector<bad_case> cases{
        {"tiny file", "abc", "no header length"},
        {"header length past the end", raw(good, 16, 1u << 20), "past the end"},
        {"bad JSON", raw("{\"w\": [1,", 16), "not valid JSON"},
        {"offsets out of range", raw(good, 8), "out of range"},
        {"reversed offsets", raw(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 16), "out of range"},
        {"shape mismatch", raw(R"({"w":{"dtype":"F32","shape":[3,2],"data_offsets":[0,16]}})", 16), "dtype x shape"},
        {"unknown dtype", raw(R"({"w":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", 16), "unsupported dtype"},
        {"missing fields", raw(R"({"w":{"dtype":"F32"}})", 16), "needs dtype"},
    };
    for (const auto& c : cases) {
        INFO(c.name);
        write_all(p, c.bytes);
        auto e = load_error(p);
        CHECK(e.message.find(c.expect) != std::string::npos);
        CHECK(e.message.find("m.safetensors") != std::string::npos);
    }
    write_all(p, raw(good, 16));
    CHECK(model::load_safetensors(p).ok());
}

TEST_CASE("a truncated checkpoint or a missing tensor fails to load with the cause") {
    auto c = test::small_config(false);
    auto dir = test::write_small_model("st-trunc", c);
    auto file = dir / "model.safetensors";
    const std::string bytes = read_all(file);
    write_all(file, bytes.substr(0, bytes.size() - 100));
    auto r = model::transformer::load(dir, {});
    REQUIRE_FALSE(r.ok());
    CHECK(r.code() == status::package_invalid);
    CHECK(r.error().message.find("out of range") != std::string::npos);
    // Rename a tensor: the loader names the one it misses.
    std::string renamed = bytes;
    auto at = renamed.find("model.norm.weight");
    REQUIRE(at != std::string::npos);
    renamed.replace(at, 10, "model.nerm");
    write_all(file, renamed);
    r = model::transformer::load(dir, {});
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("missing tensor model.norm.weight") != std::string::npos);
}

TEST_CASE("a tensor with the wrong shape for the config is rejected") {
    auto c = test::small_config(false);
    auto dir = test::write_small_model("st-shape", c);
    c.intermediate_size = 96;  // the file has 128
    std::ofstream(dir / "config.json", std::ios::trunc) << c.to_json();
    auto r = model::transformer::load(dir, {});
    REQUIRE_FALSE(r.ok());
    CHECK(r.code() == status::shape_mismatch);
    CHECK(r.error().message.find("mlp.gate_proj.weight") != std::string::npos);
}

TEST_CASE("BF16, F16 and sharded checkpoints load and agree with F32") {
    auto c = test::small_config(true);
    auto f32 = test::load_model(test::write_small_model("st-f32", c, "f32"));
    auto bf16_dir = test::write_small_model("st-bf16", c, "bf16", /*shard_bytes=*/60000);
    REQUIRE(std::filesystem::exists(bf16_dir / "model.safetensors.index.json"));
    auto bf16 = test::load_model(bf16_dir);
    auto f16 = test::load_model(test::write_small_model("st-f16", c, "f16"));
    CHECK(bf16->shape().weight_bytes * 2 == f32->shape().weight_bytes);
    CHECK(f16->shape().weight_bytes * 2 == f32->shape().weight_bytes);
    const auto v = static_cast<std::size_t>(c.vocab_size);
    const auto toks = test::random_tokens(20, c.vocab_size);
    std::vector<float> a(v), b(v), h(v);
    REQUIRE(f32->prefill(1, toks, a).ok());
    REQUIRE(bf16->prefill(1, toks, b).ok());
    REQUIRE(f16->prefill(1, toks, h).ok());
    // Rounded weights: close to F32, not equal.
    CHECK(test::max_abs_diff(a.data(), b.data(), v) < 0.25f);
    CHECK(test::max_abs_diff(a.data(), h.data(), v) < 0.05f);
    CHECK(test::max_abs_diff(a.data(), b.data(), v) > 0.0f);
}

TEST_CASE("config.json errors name the field") {
    CHECK(model::parse_hf_config("{").code() == status::package_invalid);
    auto r = model::parse_hf_config(R"({"architectures":["LlamaForCausalLM"]})");
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("LlamaForCausalLM") != std::string::npos);
    r = model::parse_hf_config(R"({"architectures":["Qwen3ForCausalLM"],"vocab_size":10})");
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("hidden_size") != std::string::npos);
    auto good = test::small_config(true);
    auto back = model::parse_hf_config(good.to_json());
    REQUIRE(back.ok());
    CHECK(back->num_experts == 8);
    CHECK(back->norm_topk_prob);
    CHECK(back->layer_is_moe(1));
}
