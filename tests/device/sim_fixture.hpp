#pragma once
// Test support for the simulated device: a tiny package description and a test
// double of the reference model whose logits are a deterministic function of the
// sequence's whole token history (so cross-talk between sequences would show).
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "device/package_spec.hpp"
#include "device/sim/sim_device.hpp"
#include "device/bf16.hpp"

namespace calserve::device::test {

class history_lm final : public model::causal_lm {
public:
    explicit history_lm(std::int64_t vocab) { shape_.vocab_size = vocab; shape_.architecture = "test"; }
    const model::model_shape& shape() const override { return shape_; }
    void_result prefill(model::seq_id seq, std::span<const model::token_id> tokens, std::span<float> logits) override {
        auto& h = seqs_[seq];
        h.insert(h.end(), tokens.begin(), tokens.end());
        fill(h, logits);
        ++calls;
        return {};
    }
    void_result decode(model::seq_id seq, model::token_id token, std::span<float> logits) override {
        auto it = seqs_.find(seq);
        if (it == seqs_.end()) return make_error(status::unknown_sequence, "decode of an unknown sequence");
        it->second.push_back(token);
        fill(it->second, logits);
        ++calls;
        return {};
    }
    std::int64_t sequence_length(model::seq_id seq) const override {
        auto it = seqs_.find(seq);
        return it == seqs_.end() ? 0 : static_cast<std::int64_t>(it->second.size());
    }
    void_result copy_prefix(model::seq_id src, model::seq_id dst, std::int64_t tokens) override {
        auto it = seqs_.find(src);
        if (it == seqs_.end() || std::int64_t(it->second.size()) < tokens)
            return make_error(status::invalid_argument, "copy_prefix past the source");
        seqs_[dst].assign(it->second.begin(), it->second.begin() + tokens);
        return {};
    }
    void_result truncate(model::seq_id seq, std::int64_t tokens) override {
        seqs_[seq].resize(static_cast<std::size_t>(tokens));
        return {};
    }
    void free_sequence(model::seq_id seq) override { seqs_.erase(seq); }
    void free_all() override { seqs_.clear(); }

    // The logits any history must produce (what the device must return, rounded to BF16).
    static void fill(const std::vector<model::token_id>& h, std::span<float> logits) {
        std::uint64_t x = 1469598103934665603ULL;
        for (auto t : h) x = (x ^ static_cast<std::uint64_t>(t)) * 1099511628211ULL;
        const double phase = static_cast<double>(x % 100003) / 100003.0 * 6.283;
        for (std::size_t v = 0; v < logits.size(); ++v)
            logits[v] = static_cast<float>(4.0 * std::sin(phase + 0.7 * static_cast<double>(v)) + 0.001 * static_cast<double>(v));
    }
    int calls = 0;

private:
    model::model_shape shape_;
    std::map<model::seq_id, std::vector<model::token_id>> seqs_;
};

inline constexpr std::int64_t k_vocab = 64;
inline constexpr std::int64_t k_context = 128;
inline constexpr const char* k_prefill = "tiny_prefill";
inline constexpr const char* k_decode = "tiny_decode";

inline tensor_desc tensor(std::string name, std::vector<std::int64_t> shape, dtype t, std::uint64_t ping,
                          std::uint64_t pong) {
    tensor_desc d{std::move(name), std::move(shape), t, 0, ping, pong, 0};
    d.bytes = static_cast<std::uint64_t>(d.elements()) * dtype_size(t);
    return d;
}

inline submodel_desc submodel(std::string name, submodel_kind kind, std::int64_t tokens, std::uint64_t base) {
    submodel_desc sm;
    sm.name = std::move(name);
    sm.kind = kind;
    sm.max_tokens = tokens;
    sm.inputs = {tensor("token", {1, tokens}, dtype::int32, base, base + 0x10000),
                 tensor("position", {1, tokens}, dtype::int32, base + 0x20000, base + 0x30000)};
    sm.outputs = {tensor("logits", {1, 1, k_vocab}, dtype::bf16, base + 0x40000, base + 0x50000)};
    sm.csrs = {{"cur_seq_len", 0x1104}, {"past_kv_cur_seq_len", 0x1144}};
    sm.chip_mask = 1;
    sm.workspace_bytes_per_chip = 1 << 20;
    sm.command_bytes_per_chip = 1 << 16;
    return sm;
}

inline package_spec tiny_spec(std::uint32_t chips = 1) {
    package_spec p;
    p.name = "tiny-test";
    p.architecture = "test";
    p.vocab_size = k_vocab;
    p.context = k_context;
    p.chip_count = chips;
    p.submodels = {submodel(k_prefill, submodel_kind::prefill, k_context, 0xc0000000),
                   submodel(k_decode, submodel_kind::decode, 1, 0xd0000000)};
    for (auto& sm : p.submodels) sm.chip_mask = (1u << chips) - 1u;
    p.kv = kv_layout{2, 2, 8, k_context, 2, 2, 2, 16};
    p.chips.assign(chips, chip_memory{8u << 20, 1u << 20});
    p.hidden_size = 32;
    p.num_heads = 4;
    p.intermediate_size = 64;
    return p;
}

inline constexpr std::int64_t k_batch = 4;
inline constexpr const char* k_decode_b4 = "tiny_decode_b4";

// A batched decode program as packages carry them: token/position {B,1}, logits {B,1,vocab}.
inline submodel_desc decode_profile(std::string name, std::int64_t batch, std::uint64_t base) {
    submodel_desc sm = submodel(std::move(name), submodel_kind::decode, 1, base);
    sm.batch = batch;
    sm.inputs = {tensor("token", {batch, 1}, dtype::int32, base, base + 0x10000),
                 tensor("position", {batch, 1}, dtype::int32, base + 0x20000, base + 0x30000)};
    sm.outputs = {tensor("logits", {batch, 1, k_vocab}, dtype::bf16, base + 0x40000, base + 0x50000)};
    return sm;
}

// Qwen3-30B-A3B's shape on two chips of 9 GB of parameters each (placement and routing tests).
inline package_spec moe_30b_spec() {
    auto spec = tiny_spec(2);
    spec.chips = {chip_memory{9'000'000'000, 0}, chip_memory{9'000'000'000, 0}};
    spec.kv.layers = 48;
    spec.hidden_size = 2048;
    spec.num_heads = 32;
    spec.num_experts = 128;
    spec.experts_per_token = 8;
    spec.intermediate_size = 768;
    spec.vocab_size = 151936;
    return spec;
}

// tiny_spec plus a batch-4 decode program.
inline package_spec tiny_batched_spec() {
    package_spec p = tiny_spec();
    p.submodels.push_back(decode_profile(k_decode_b4, k_batch, 0xe0000000));
    p.batch = k_batch;
    p.kv.slots = 8;
    return p;
}

// tiny_batched_spec whose decode programs end in a sampling head of top-k 8 (device/sampling_head.hpp).
inline package_spec head_spec() {
    auto p = tiny_batched_spec();
    for (auto& sm : p.submodels)
        if (sm.kind == submodel_kind::decode) add_sampling_head(sm, 8);
    p.sampling_head_k = 8;
    return p;
}

struct sim_fixture {
    sim::manual_scheduler clock;
    std::shared_ptr<sim::sim_device> dev;
    history_lm* lm = nullptr;  // owned by the device after configure

    explicit sim_fixture(double step_ms = 10, double d2h_ms = 2, package_spec spec = tiny_spec()) {
        sim::sim_options o;
        o.scheduler = &clock;
        o.latency.step_ms = step_ms;
        o.latency.d2h_ms = d2h_ms;
        o.kv_block_tokens = 16;
        o.make_model = [this](const package_spec& s) -> result<std::unique_ptr<model::causal_lm>> {
            auto m = std::make_unique<history_lm>(s.vocab_size);
            lm = m.get();
            return std::unique_ptr<model::causal_lm>(std::move(m));
        };
        dev = sim::sim_device::create(std::move(o));
        REQUIRE(dev->load(spec).ok());
        REQUIRE(dev->configure().ok());
        REQUIRE(dev->warmup().ok());
    }

    // Fills a slot for `tokens` appended to `seq` (which holds `past`) and submits it.
    result<job_id> submit(const char* sm, slot s, seq_id seq, const std::vector<std::int32_t>& tokens) {
        const auto past = dev->kv_length(seq);
        std::vector<std::int32_t> pos(tokens.size());
        for (std::size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<std::int32_t>(past + static_cast<std::int64_t>(i));
        if (auto r = dev->slice(sm, s, static_cast<std::int64_t>(tokens.size())); !r) return r.error();
        if (auto r = dev->write_input(sm, s, "token", std::as_bytes(std::span(tokens))); !r) return r.error();
        if (auto r = dev->write_input(sm, s, "position", std::as_bytes(std::span(pos))); !r) return r.error();
        if (auto r = dev->write_csr(sm, s, "cur_seq_len", static_cast<std::uint32_t>(tokens.size())); !r) return r.error();
        if (auto r = dev->write_csr(sm, s, "past_kv_cur_seq_len", static_cast<std::uint32_t>(past)); !r) return r.error();
        return dev->infer(sm, s, seq);
    }

    // The batched decode protocol: one token per row (padding rows: token 0,
    // position 0, CSRs left unwritten), then infer_rows.
    result<job_id> submit_rows(const char* sm, slot s, const std::vector<seq_id>& rows,
                               const std::vector<std::int32_t>& tokens) {
        std::vector<std::int32_t> tok(rows.size(), 0), pos(rows.size(), 0);
        if (auto r = dev->slice(sm, s, 1); !r) return r.error();
        for (std::size_t b = 0; b < rows.size(); ++b) {
            if (rows[b] == k_padding_row) continue;
            tok[b] = tokens[b];
            pos[b] = static_cast<std::int32_t>(dev->kv_length(rows[b]));
        }
        if (auto r = dev->write_input(sm, s, "token", std::as_bytes(std::span(tok))); !r) return r.error();
        if (auto r = dev->write_input(sm, s, "position", std::as_bytes(std::span(pos))); !r) return r.error();
        for (std::size_t b = 0; b < rows.size(); ++b) {
            if (rows[b] == k_padding_row) continue;
            const auto row = static_cast<std::int64_t>(b);
            if (auto r = dev->write_csr_row(sm, s, "cur_seq_len", row, 1); !r) return r.error();
            if (auto r = dev->write_csr_row(sm, s, "past_kv_cur_seq_len", row, static_cast<std::uint32_t>(pos[b])); !r)
                return r.error();
        }
        return dev->infer_rows(sm, s, rows);
    }

    std::vector<float> logits(const char* sm, slot s) {
        auto out = dev->output(sm, s, "logits");
        REQUIRE(out.ok());
        std::vector<float> f(out->size() / 2);
        load_bf16(*out, f);
        return f;
    }
};

inline std::vector<float> expected_logits(const std::vector<model::token_id>& history) {
    std::vector<float> l(k_vocab);
    history_lm::fill(history, l);
    round_to_bf16(l);
    return l;
}

}  // namespace calserve::device::test
