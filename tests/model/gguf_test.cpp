// GGUF checkpoints: the header reader's validation, the Hugging Face <-> GGUF
// conversion (same greedy tokens and bit-identical logits for F32/BF16, Q8_0
// within a stated tolerance), the Q8_0 kernel, and the embedded tokenizer.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include "model/weights/gguf_model.hpp"
#include "model/core/bf16.hpp"
#include "model/cpu/kernels.hpp"
#include "model/weights/stored_rows.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "tests/model/tokenizer_corpus.hpp"
#include "tests/model/transformer_fixture.hpp"

using namespace calserve;
namespace gguf = calserve::model::gguf;

namespace {

std::span<const std::byte> bytes_of(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

// A minimal valid file: two keys, one F32 tensor [2, 3] and one Q8_0 row of 32.
std::string small_file() {
    gguf::writer w;
    w.add_string("general.architecture", "qwen3");
    w.add_u32("qwen3.block_count", 1);
    std::vector<std::byte> f32(24), q8(34);
    REQUIRE(w.add_tensor("a", gguf::tensor_type::f32, {2, 3}, f32));
    REQUIRE(w.add_tensor("b", gguf::tensor_type::q8_0, {1, 32}, q8));
    return w.serialise();
}

result<gguf::header> parse(const std::string& s) { return gguf::parse_header(bytes_of(s), s.size(), "t"); }

// rows x cols weights uniform in [-1, 1) quantised to Q8_0 (a GGUF's bytes); `weights`, when
// given, receives the unquantised values.
std::vector<std::byte> random_q8_rows(std::mt19937& gen, std::int64_t rows, std::int64_t cols,
                                      std::vector<float>* weights = nullptr) {
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    std::vector<float> wf(static_cast<std::size_t>(rows * cols));
    for (auto& v : wf) v = d(gen);
    std::vector<std::byte> wq(static_cast<std::size_t>(rows * cols / 32 * 34));
    model::quantize_q8_0(wf.data(), rows * cols, wq.data());
    if (weights != nullptr) *weights = std::move(wf);
    return wq;
}

template <class T>
void poke(std::string& s, std::size_t at, T v) {
    std::memcpy(s.data() + at, &v, sizeof(T));
}

std::size_t find(const std::string& s, std::string_view needle) {
    const auto at = s.find(needle);
    REQUIRE(at != std::string::npos);
    return at;
}

// The loaded GGUF and directory models decode the same greedy tokens; returns the
// largest logit difference seen (0 when bit-identical).
float compare_models(model::transformer& a, model::transformer& b, std::size_t steps) {
    const auto v = static_cast<std::size_t>(a.shape().vocab_size);
    REQUIRE(b.shape().vocab_size == a.shape().vocab_size);
    std::vector<float> la(v), lb(v);
    const auto prompt = test::random_tokens(9, a.shape().vocab_size, 5);
    REQUIRE(a.prefill(1, prompt, la).ok());
    REQUIRE(b.prefill(1, prompt, lb).ok());
    float worst = test::max_abs_diff(la.data(), lb.data(), v);
    for (std::size_t s = 0; s < steps; ++s) {
        const auto ta = static_cast<model::token_id>(std::max_element(la.begin(), la.end()) - la.begin());
        const auto tb = static_cast<model::token_id>(std::max_element(lb.begin(), lb.end()) - lb.begin());
        INFO("step " << s);
        CHECK(ta == tb);
        REQUIRE(a.decode(1, ta, la).ok());
        REQUIRE(b.decode(1, ta, lb).ok());
        worst = std::max(worst, test::max_abs_diff(la.data(), lb.data(), v));
    }
    return worst;
}

std::filesystem::path to_gguf(const std::filesystem::path& dir, const std::string& dtype) {
    const auto out = dir / ("model-" + dtype + ".gguf");
    auto r = model::write_gguf_from_hf(dir, out, dtype);
    if (!r) FAIL(r.error().what());
    return out;
}

}  // namespace

TEST_CASE("gguf: a written header parses back with dims in Hugging Face order", "[gguf]") {
    const std::string s = small_file();
    auto h = parse(s);
    REQUIRE(h.ok());
    CHECK(h->version == 3);
    CHECK(h->alignment == 32);
    CHECK(h->data_offset % 32 == 0);
    REQUIRE(h->tensors.size() == 2);
    CHECK(h->tensors[0].dims == std::vector<std::int64_t>{2, 3});
    CHECK(h->tensors[1].type == gguf::tensor_type::q8_0);
    CHECK(h->tensors[1].bytes == 34);
    CHECK(h->tensors[1].offset == 32);
    CHECK(h->string("general.architecture").value() == std::optional<std::string>("qwen3"));
    CHECK(h->integer("qwen3.block_count").value() == std::optional<std::int64_t>(1));
    CHECK_FALSE(h->integer("general.architecture").ok());  // wrong type is an error, not a guess
}

TEST_CASE("gguf: every header defect is a clear error, never a crash", "[gguf]") {
    const std::string good = small_file();
    auto expect_error = [](const std::string& s, const std::string& words) {
        INFO("expecting: " << words);
        auto h = parse(s);
        REQUIRE_FALSE(h.ok());
        INFO(h.error().message);
        CHECK(h.error().message.find(words) != std::string::npos);
    };
    std::string s = good;
    s[0] = 'X';
    expect_error(s, "bad magic");
    s = good, poke<std::uint32_t>(s, 4, 2);
    expect_error(s, "version 2");
    s = good, poke<std::uint64_t>(s, 8, 1ull << 40);
    expect_error(s, "exceed the file");
    s = good, poke<std::uint64_t>(s, 24, 1ull << 50);  // the first key's length
    expect_error(s, "string length");
    s = good, poke<std::uint32_t>(s, find(good, "general.architecture") + 20, 99);  // value type
    expect_error(s, "value type 99");
    const std::size_t b_info = find(good, std::string("\x01\0\0\0\0\0\0\0b", 9)) + 9;  // after name "b"
    s = good, poke<std::uint64_t>(s, b_info + 4, 0);  // ne[0] = 0
    expect_error(s, "dimension 0");
    s = good, poke<std::uint64_t>(s, b_info + 4, 33);  // Q8_0 row of 33
    expect_error(s, "not a multiple of 32");
    s = good, poke<std::uint32_t>(s, b_info + 4 + 16, 2);  // Q4_0
    auto h = parse(s);
    REQUIRE_FALSE(h.ok());
    CHECK(h.error().code == status::unsupported);
    s = good, poke<std::uint64_t>(s, b_info + 4 + 20, 16);  // misaligned offset
    expect_error(s, "not a multiple of the alignment");
    s = good, poke<std::uint64_t>(s, b_info + 4 + 20, 1 << 20);
    expect_error(s, "past the end");
    s = good, poke<std::uint64_t>(s, b_info + 4 + 20, 0);  // on top of "a"
    expect_error(s, "overlap");
    expect_error(good.substr(0, parse(good)->data_offset + 60), "past the end");  // "b" ends at +66
    // Every prefix and every single-byte corruption: an error or a value, no crash.
    for (std::size_t n = 0; n < good.size(); ++n) (void)parse(good.substr(0, n));
    for (std::size_t i = 0; i < good.size(); ++i) {
        s = good;
        s[i] = static_cast<char>(s[i] ^ 0x5a);
        (void)parse(s);
    }
}

TEST_CASE("gguf: a short prefix asks for more instead of failing", "[gguf]") {
    const std::string good = small_file();
    bool more = false;
    auto h = gguf::parse_header(bytes_of(good).subspan(0, 40), good.size(), "t", &more);
    CHECK_FALSE(h.ok());
    CHECK(more);
}

TEST_CASE("gguf: Q8_0 int8 kernel matches the dequantised dot product, row-exact at any batch", "[gguf][kernels]") {
    const std::int64_t rows = 37, cols = 1024;
    std::mt19937 gen(3);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    std::vector<float> wf;
    std::vector<std::byte> wq = random_q8_rows(gen, rows, cols, &wf);
    model::tensor_view w{model::dtype::q8_0, rows, cols, cols, wq.data()};
    std::vector<float> deq(static_cast<std::size_t>(rows * cols));
    model::convert_rows_to_f32(w, 0, rows, deq.data());
    for (std::size_t i = 0; i < deq.size(); ++i) REQUIRE(std::abs(deq[i] - wf[i]) <= 1.0f / 254.0f + 1e-3f);
    for (std::int64_t nvec : {1, 2, 3, 4, 5, 9}) {
        std::vector<float> x(static_cast<std::size_t>(nvec * cols));
        for (auto& v : x) v = 2.0f * d(gen);
        std::vector<float> multi(static_cast<std::size_t>(nvec * rows)), one(static_cast<std::size_t>(rows));
        model::dot_rows_multi(w, 0, rows, x.data(), nvec, cols, multi.data(), rows);
        for (std::int64_t v = 0; v < nvec; ++v) {
            model::dot_rows(w, 0, rows, x.data() + v * cols, one.data());
            INFO("nvec " << nvec << " vector " << v);
            CHECK(std::memcmp(multi.data() + v * rows, one.data(), one.size() * sizeof(float)) == 0);
            // The kernel's arithmetic, scalar in double: x quantised per block like the
            // weights (d = amax / 127, round to nearest even), int8 products, scales per block.
            const float* xv = x.data() + v * cols;
            for (std::int64_t r = 0; r < rows; ++r) {
                const std::byte* row = w.row(r);
                double want = 0;
                for (std::int64_t b = 0; b < cols / 32; ++b) {
                    float amax = 0;
                    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::abs(xv[b * 32 + i]));
                    const float dx = amax / 127.0f, id = dx != 0 ? 1.0f / dx : 0.0f;
                    std::uint16_t dh;
                    std::memcpy(&dh, row + b * 34, 2);
                    std::int64_t isum = 0;
                    for (int i = 0; i < 32; ++i)
                        isum += static_cast<std::int64_t>(static_cast<std::int8_t>(row[b * 34 + 2 + i])) *
                                static_cast<std::int64_t>(std::nearbyint(xv[b * 32 + i] * id));
                    want += static_cast<double>(model::f16_to_f32(dh) * dx) * static_cast<double>(isum);
                }
                CHECK(std::abs(one[static_cast<std::size_t>(r)] - want) < 1e-4 * (1 + std::abs(want)));
                // And near the unquantised product (activation rounding only).
                const float exact = model::dot_f32(deq.data() + r * cols, xv, cols);
                CHECK(std::abs(one[static_cast<std::size_t>(r)] - exact) < 0.5f);
            }
        }
    }
}

// The VNNI form (panels of 16 rows packed per call, several vectors per micro-kernel) and
// the AVX2 form (eight rows at a time) give the same bits: odd and even block counts, row
// counts that leave a part panel and a part eight, vector counts that split into uneven groups.
TEST_CASE("gguf: Q8_0 kernel's VNNI form gives the AVX2 form's bits", "[gguf][kernels]") {
    if (!model::q8_dot_vnni()) {
        WARN("no AVX512_VNNI on this CPU: only the AVX2 form runs");
        return;
    }
    std::mt19937 gen(11);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (std::int64_t cols : {32, 96, 1024, 3072 + 32}) {
        const std::int64_t rows = 53;
        const std::vector<std::byte> wq = random_q8_rows(gen, rows, cols);
        const model::tensor_view w{model::dtype::q8_0, rows, cols, cols, wq.data()};
        for (std::int64_t nvec : {1, 2, 3, 4, 5, 7, 16, 33}) {
            std::vector<float> x(static_cast<std::size_t>(nvec * cols));
            for (auto& v : x) v = 3.0f * d(gen);
            x[0] = 0.0f;  // a zero and a tiny block scale
            model::q8_vectors xq;
            model::quantize_vectors_q8(x.data(), nvec, cols, cols, xq);
            std::vector<float> vnni(static_cast<std::size_t>(nvec * rows)), avx2(vnni.size());
            model::dot_rows_q8(w, 0, rows, xq, nvec, vnni.data(), rows);
            model::allow_q8_dot_vnni(false);
            model::dot_rows_q8(w, 0, rows, xq, nvec, avx2.data(), rows);
            model::allow_q8_dot_vnni(true);
            INFO("cols " << cols << " nvec " << nvec);
            CHECK(std::memcmp(vnni.data(), avx2.data(), vnni.size() * sizeof(float)) == 0);
        }
    }
}

// A model's Q8_0 matrices are interleaved once at load (q8_panels_pin), in a copy or in
// their own bytes; every view the transformer takes of them (the whole matrix, a shard's
// row or column slice, a thread's row range on or off a panel) must read the panels and
// give per-call packing's bits, in both forms, and the rows must come back at the end.
TEST_CASE("gguf: Q8_0 panels pinned at load give per-call packing's and the AVX2 form's bits", "[gguf][kernels]") {
    if (!model::q8_dot_vnni()) {
        WARN("no AVX512_VNNI on this CPU: nothing is pinned");
        return;
    }
    std::mt19937 gen(17);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    for (bool in_place : {false, true}) {
        // 300 rows: 18 panels and 12 rows, so a copy; 304 = 19 panels, packed in place.
        const std::int64_t rows = in_place ? 304 : 300, cols = 1024 + 64;  // 34 blocks
        std::vector<std::byte> wq = random_q8_rows(gen, rows, cols);
        const std::vector<std::byte> original = wq;
        const model::tensor_view w{model::dtype::q8_0, rows, cols, cols, wq.data()};
        struct view_case {
            const char* name;
            model::tensor_view v;
            std::int64_t r0, r1;
        };
        const std::vector<view_case> cases{
            {"whole", w, 0, rows},
            {"rows from a panel", w, 16, 208},
            {"rows across the tail", w, 128, rows},
            {"rows off a panel", w, 5, 77},
            {"row slice", w.row_slice(32, 250), 0, 218},
            {"row slice's range", w.row_slice(48, rows), 16, rows - 48},
            {"row slice off a panel", w.row_slice(7, 100), 3, 93},
            {"column slice", w.col_slice(64, 64 + 512), 0, rows},
            {"shard", w.row_slice(144, 272).col_slice(32 * 3, cols), 9, 128},
        };
        for (std::int64_t nvec : {1, 3, 8, 9, 16}) {
            INFO((in_place ? "in place" : "a copy") << ", nvec " << nvec);
            std::vector<model::q8_vectors> xs;
            for (const auto& c : cases) {
                std::vector<float> x(static_cast<std::size_t>(nvec * c.v.cols));
                for (auto& v : x) v = 2.0f * d(gen);
                xs.emplace_back();
                model::quantize_vectors_q8(x.data(), nvec, c.v.cols, c.v.cols, xs.back());
            }
            auto run = [&](bool vnni) {
                model::allow_q8_dot_vnni(vnni);
                std::vector<std::vector<float>> out;
                for (std::size_t i = 0; i < cases.size(); ++i) {
                    const auto& c = cases[i];
                    const std::int64_t n = c.r1 - c.r0;
                    out.emplace_back(static_cast<std::size_t>(nvec * n));
                    model::dot_rows_q8(c.v, c.r0, c.r1, xs[i], nvec, out.back().data(), n);
                }
                model::allow_q8_dot_vnni(true);
                return out;
            };
            const auto per_call = run(true), avx2 = run(false);
            std::vector<std::vector<float>> pinned, pinned_avx2;
            {
                const auto pin = model::q8_panels_pin(w, in_place ? wq.data() : nullptr);
                REQUIRE(pin != nullptr);
                CHECK(model::q8_panels_pin(w) == nullptr);  // a tied matrix is packed once
                CHECK((wq != original) == in_place);
                pinned = run(true);
                pinned_avx2 = run(false);
                // Rows as FP32 (an embedding table tied to the LM head) from the panels.
                const model::tensor_view was{model::dtype::q8_0, rows, cols, cols, original.data()};
                for (const auto& c : {cases[0], cases[7], cases[8]})
                    for (std::int64_t r : {std::int64_t{0}, std::int64_t{17}, c.v.rows - 1}) {
                        const model::tensor_view from{c.v.type, c.v.rows, c.v.cols, c.v.row_stride,
                                                      was.data + (c.v.data - w.data)};
                        std::vector<float> got(static_cast<std::size_t>(c.v.cols)), want(got.size());
                        model::row_to_f32(c.v, r, got.data());
                        model::convert_row_to_f32(from, r, want.data());
                        CHECK(got == want);
                    }
            }
            CHECK(wq == original);  // the rows are back
            for (std::size_t i = 0; i < cases.size(); ++i) {
                INFO(cases[i].name);
                const std::size_t bytes = per_call[i].size() * sizeof(float);
                CHECK(std::memcmp(pinned[i].data(), per_call[i].data(), bytes) == 0);
                CHECK(std::memcmp(pinned_avx2[i].data(), per_call[i].data(), bytes) == 0);
                CHECK(std::memcmp(avx2[i].data(), per_call[i].data(), bytes) == 0);
            }
        }
        // The handle's end unpins: the matrix can be pinned again.
        CHECK(model::q8_panels_pin(w) != nullptr);
    }
}

TEST_CASE("gguf: F32 and BF16 files serve the directory's greedy tokens with identical logits", "[gguf][transformer]") {
    for (bool moe : {false, true}) {
        for (std::string dtype : {"f32", "bf16"}) {
            INFO("moe " << moe << " dtype " << dtype);
            auto dir = test::write_small_model("gguf-exact-" + std::to_string(moe) + dtype, test::small_config(moe), dtype);
            auto a = test::load_model(dir);
            auto b = test::load_model(to_gguf(dir, "keep"));
            CHECK(b->config().architecture == a->config().architecture);
            CHECK(b->config().norm_topk_prob == a->config().norm_topk_prob);
            if (dtype == "f32") CHECK(b->shape().weight_bytes == a->shape().weight_bytes);  // BF16 norms become F32
            CHECK(compare_models(*a, *b, 12) == 0.0f);
        }
    }
    auto tied = test::write_small_model("gguf-tied", test::small_config(false, true), "bf16");
    auto b = test::load_model(to_gguf(tied, "keep"));
    CHECK(b->config().tie_word_embeddings);
    CHECK(compare_models(*test::load_model(tied), *b, 4) == 0.0f);
}

// Stated tolerance (docs/gguf.md): the largest |logit difference| from the F32
// model is under 8% of the logits' RMS for dense models and 25% for MoE (a
// router probability within the quantisation error of another picks a different
// expert), and the greedy token agrees.
TEST_CASE("gguf: Q8_0 logits stay within the stated tolerance of the F32 model", "[gguf][transformer]") {
    for (bool moe : {false, true}) {
        INFO("moe " << moe);
        auto dir = test::write_small_model("gguf-q8-" + std::to_string(moe), test::small_config(moe), "f32");
        auto a = test::load_model(dir);
        auto q = test::load_model(to_gguf(dir, "q8_0"));
        const auto v = static_cast<std::size_t>(a->shape().vocab_size);
        std::vector<float> la(v), lq(v);
        const auto prompt = test::random_tokens(17, a->shape().vocab_size, 8);
        REQUIRE(a->prefill(1, prompt, la).ok());
        REQUIRE(q->prefill(1, prompt, lq).ok());
        const float diff = test::max_abs_diff(la.data(), lq.data(), v);
        double sq = 0;
        for (float x : la) sq += static_cast<double>(x) * x;
        WARN("Q8_0 vs F32 max |logit diff| " << diff << ", logit rms " << std::sqrt(sq / static_cast<double>(v)));
        const double rms = std::sqrt(sq / static_cast<double>(v));
        CHECK(diff < (moe ? 0.25 : 0.08) * rms);
        CHECK(std::max_element(la.begin(), la.end()) - la.begin() == std::max_element(lq.begin(), lq.end()) - lq.begin());
        CHECK(diff > 0.0f);  // it really is quantised
        CHECK(q->shape().weight_bytes < a->shape().weight_bytes / 3);
    }
}

TEST_CASE("gguf: Q8_0 decode_batch rows equal decode alone bit for bit", "[gguf][batch]") {
    for (bool moe : {false, true}) {
        auto dir = test::write_small_model("gguf-q8-batch-" + std::to_string(moe), test::small_config(moe), "f32");
        auto m = test::load_model(to_gguf(dir, "q8_0"));
        const auto v = static_cast<std::size_t>(m->shape().vocab_size);
        std::vector<float> scratch(v);
        for (model::seq_id s = 1; s <= 6; ++s) {
            const auto prompt = test::random_tokens(2 + 3 * static_cast<std::size_t>(s), m->shape().vocab_size, 30 + s);
            REQUIRE(m->prefill(s, prompt, scratch).ok());
            REQUIRE(m->prefill(s + 1000, prompt, scratch).ok());
        }
        std::vector<model::seq_id> ids{1, 2, 3, 4, 5, 6};
        const auto next = test::random_tokens(ids.size(), m->shape().vocab_size, 77);
        std::vector<float> batched(ids.size() * v), alone(v);
        REQUIRE(m->decode_batch(ids, next, batched).ok());
        for (std::size_t i = 0; i < ids.size(); ++i) {
            REQUIRE(m->decode(ids[i] + 1000, next[i], alone).ok());
            INFO("moe " << moe << " row " << i);
            CHECK(std::memcmp(batched.data() + i * v, alone.data(), v * sizeof(float)) == 0);
        }
    }
}

TEST_CASE("gguf: the embedded tokenizer encodes the conformance corpus exactly as tokenizer.json", "[gguf][tokenizer]") {
    if (!std::filesystem::exists(test::tokenizer_dir() / "tokenizer.json")) FAIL("run tools/bootstrap (tokenizer)");
    auto dir = test::write_small_model("gguf-tokenizer", test::small_config(false), "bf16");
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
        std::filesystem::copy_file(test::tokenizer_dir() / f, dir / f, std::filesystem::copy_options::overwrite_existing);
    const auto file = to_gguf(dir, "keep");
    auto json_tok = model::tokenizer::load(dir);
    auto gguf_tok = model::tokenizer::load(file);
    REQUIRE(json_tok.ok());
    REQUIRE(gguf_tok.ok());
    const auto& a = **json_tok;
    const auto& b = **gguf_tok;
    CHECK(a.vocab_size() == b.vocab_size());
    CHECK(a.eos_token_ids() == b.eos_token_ids());
    CHECK(b.is_special(*b.token_to_id("<|im_start|>")));
    CHECK_FALSE(b.is_special(*b.token_to_id("<think>")));
    for (const auto& s : test::corpus::conformance_corpus(20261130, 2100, 20000)) {
        auto x = a.encode(s);
        auto y = b.encode(s);
        REQUIRE(x.ok() == y.ok());
        if (x.ok()) {
            INFO(s.substr(0, 200));
            REQUIRE(*x == *y);
        }
    }
    auto chat = b.apply_chat_template(std::vector<model::chat_message>{{"user", "hi"}}, true);
    REQUIRE(chat.ok());
    CHECK(*chat == a.apply_chat_template(std::vector<model::chat_message>{{"user", "hi"}}, true).value());
}

TEST_CASE("gguf: hyperparameters are checked like config.json", "[gguf]") {
    auto dir = test::write_small_model("gguf-hparams", test::small_config(true), "bf16");
    auto h = model::read_gguf_header(to_gguf(dir, "keep"));
    REQUIRE(h.ok());
    auto c = model::hf_config_from_gguf(*h);
    REQUIRE(c.ok());
    CHECK(c->num_experts == 8);
    CHECK(c->mlp_only_layers.empty());
    h->kv.erase("qwen3moe.block_count");
    auto missing = model::hf_config_from_gguf(*h);
    REQUIRE_FALSE(missing.ok());
    CHECK(missing.error().message.find("qwen3moe.block_count") != std::string::npos);
    h->kv["general.architecture"].s = "llama";
    CHECK_FALSE(model::hf_config_from_gguf(*h).ok());
}

TEST_CASE("gguf: make-model --format gguf, and reference reads the file like the directory", "[gguf][cli]") {
    if (!std::filesystem::exists(test::tokenizer_dir() / "tokenizer.json")) FAIL("run tools/bootstrap (tokenizer)");
    auto dir = test::scratch_dir("gguf-cli");
    const auto bin = test::calserve_binary().string();
    const auto hf = dir / "m", file = dir / "m.gguf";
    auto run = [](const std::string& cmd) { return std::system((cmd + " > /dev/null 2>&1").c_str()); };
    REQUIRE(run(bin + " make-model --preset tiny-dense --dtype bf16 --seed 3 --out " + hf.string() + " --tokenizer " +
                test::tokenizer_dir().string()) == 0);
    REQUIRE(run(bin + " make-model --format gguf --from " + hf.string() + " --out " + file.string()) == 0);
    CHECK(model::is_gguf_file(file));
    std::ofstream(dir / "p.jsonl") << "{\"id\":\"t\",\"text\":\"<|im_start|>user\\nHello, GGUF!<|im_end|>\"}\n";
    auto reference = [&](const std::filesystem::path& model, const std::string& out) {
        REQUIRE(run(bin + " reference --model " + model.string() + " --prompts " + (dir / "p.jsonl").string() +
                    " --max-tokens 6 --top 3 --output " + (dir / out).string()) == 0);
        std::ifstream in(dir / out);
        return std::string(std::istreambuf_iterator<char>(in), {});
    };
    const std::string a = reference(hf, "hf.jsonl");
    CHECK_FALSE(a.empty());
    CHECK(a == reference(file, "gguf.jsonl"));  // same prompt ids, tokens and top-3 logits
    CHECK(run(bin + " make-model --format gguf --from " + hf.string() + " --gguf-dtype q4 --out " + file.string()) != 0);
}

TEST_CASE("gguf: the fuzz seeds parse and map to configs", "[gguf]") {
    const auto seeds = test::source_dir() / "tests" / "fuzz" / "corpus" / "fuzz_gguf_model";
    int parsed = 0;
    for (const auto& e : std::filesystem::directory_iterator(seeds)) {
        if (!e.path().string().ends_with(".gguf") || e.path().filename() == "vocab-only.gguf") continue;
        INFO(e.path().filename().string());
        auto h = model::read_gguf_header(e.path());
        REQUIRE(h.ok());
        auto c = model::hf_config_from_gguf(*h);
        REQUIRE(c.ok());
        CHECK(c->vocab_size == 4);
        ++parsed;
    }
    CHECK(parsed == 4);
}

TEST_CASE("gguf: a file that is not GGUF, or a GGUF without a tokenizer, is a clear error", "[gguf]") {
    auto dir = test::scratch_dir("gguf-not");
    std::ofstream(dir / "x.bin") << "not a model";
    auto c = model::load_hf_config(dir / "x.bin");
    REQUIRE_FALSE(c.ok());
    CHECK(c.error().message.find("not a GGUF file") != std::string::npos);
    auto m = test::write_small_model("gguf-no-tokenizer", test::small_config(false), "bf16");
    auto tok = model::tokenizer::load(to_gguf(m, "keep"));
    REQUIRE_FALSE(tok.ok());
    CHECK(tok.error().message.find("no embedded tokenizer") != std::string::npos);
}

TEST_CASE("gguf: Q8_0 under tensor parallel 2 equals the unsplit model up to summation order", "[gguf][transformer]") {
    for (bool moe : {false, true}) {
        auto dir = test::write_small_model("gguf-q8-tp-" + std::to_string(moe), test::small_config(moe), "f32");
        const auto file = to_gguf(dir, "q8_0");
        auto one = test::load_model(file, 1);
        auto two = test::load_model(file, 2);
        const auto v = static_cast<std::size_t>(one->shape().vocab_size);
        std::vector<float> a(v), b(v);
        const auto prompt = test::random_tokens(11, one->shape().vocab_size, 4);
        REQUIRE(one->prefill(1, prompt, a).ok());
        REQUIRE(two->prefill(1, prompt, b).ok());
        INFO("moe " << moe);
        CHECK(test::max_abs_diff(a.data(), b.data(), v) < 1e-3f);
    }
}
