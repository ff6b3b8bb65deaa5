// Gate D: semantics (names, types, logits contract, decode profiles, batch/context/vocab, units, topology).
#include <algorithm>
#include <set>

#include "model/package/validate_internal.hpp"

namespace calserve::model::package {

namespace {

constexpr std::uint64_t k_max_plausible_device_bytes = 1ull << 40;  // 1 TiB per chip
constexpr std::string_view k_supported_runtime = "0.7.6";

std::string info_path(const parsed_submodel& s) { return s.manifest->dir + "/submodel_memory_reserved_info.txt"; }

void check_names(validation_context& c) {
    std::vector<std::pair<std::string, std::string>> names;  // name, file
    for (const auto& s : c.subs) names.emplace_back(s.info ? s.info->name : s.manifest->name, info_path(s));
    for (const auto& [a, fa] : names)
        for (const auto& [b, fb] : names)
            if (&a != &b && (a.empty() || b.find(a) != std::string::npos))
                c.add("D_SUBMODEL_NAME_AMBIGUOUS", severity::error, 'D', fa,
                      "submodel name '" + a + "' is empty or a substring of '" + b + "'");
}

void check_types(validation_context& c, const parsed_submodel& s) {
    if (!s.info) return;
    const auto& t = s.info->type;
    if (t != "llm_prefill" && t != "llm_decode" && t != "kv_update")
        return c.add("D_UNKNOWN_SUBMODEL_TYPE", severity::error, 'D', info_path(s), "smodel_type '" + t + "'");
    const bool prefill = s.manifest->role == submodel_role::prefill;
    if (s.compile && s.compile->is_prefill != prefill)
        c.add("D_ROLE_MISMATCH", severity::error, 'D', s.manifest->dir + "/compile_config.yaml",
              "is_prefill disagrees with the manifest role");
    const std::string expected = prefill ? "llm_prefill" : "llm_decode";
    if (t != expected)
        c.add("D_TYPE_LABEL_MISMATCH", severity::warning, 'D', info_path(s),
              std::string(to_string(s.manifest->role)) + " submodel labelled " + t +
                  " (role taken from the manifest and compile_config.yaml; never schedule by this label)");
}

void check_logits(validation_context& c, const parsed_submodel& s) {
    if (!s.info) return;
    for (const auto& o : s.info->outputs) {
        if (o.name != "logits") continue;
        if (parse_dtype(o.dtype) != dtype::bf16)
            c.add("D_LOGITS_DTYPE", severity::error, 'D', info_path(s), "logits dtype " + o.dtype + ", expected BF16");
        const std::vector<std::int64_t> want{static_cast<std::int64_t>(s.manifest->batch), 1, c.pkg.vocab};
        const auto* m = s.manifest->output("logits");
        if (o.shape != want || (m && m->shape != want))
            c.add("D_LOGITS_SHAPE", severity::error, 'D', info_path(s),
                  "logits shape is not [" + std::to_string(s.manifest->batch) + ",1,vocab]");
    }
}

// A decode profile of batch B takes [B,1] token and position inputs (manifest and submodel file).
void check_profile_inputs(validation_context& c, const parsed_submodel& s) {
    const std::vector<std::int64_t> want{static_cast<std::int64_t>(s.manifest->batch), 1};
    for (const char* name : {"token", "position"}) {
        const auto* t = s.manifest->input(name);
        bool ok = t && t->shape == want;
        if (s.info)
            for (const auto& row : s.info->inputs) ok = ok && (row.name != name || row.shape == want);
        if (!ok)
            c.add("D_PROFILE_SHAPE", severity::error, 'D', info_path(s),
                  std::string(name) + " is missing or not [" + std::to_string(s.manifest->batch) + ",1] for batch " +
                      std::to_string(s.manifest->batch));
    }
}

// Decode batch profiles: one of batch 1, no batch twice, none past the CSR row space; the
// manifest batch is the largest profile; the prefill stays batch 1.
void check_profiles(validation_context& c) {
    std::set<std::uint32_t> batches;
    for (const auto& s : c.subs) {
        const auto& m = *s.manifest;
        if (m.role == submodel_role::prefill) {
            if (m.batch != k_prefill_batch)
                c.add("D_BATCH_MISMATCH", severity::error, 'D', info_path(s),
                      "prefill batch " + std::to_string(m.batch) + ": the prefill is a batch-1 program");
            continue;
        }
        if (!batches.insert(m.batch).second)
            c.add("D_DECODE_PROFILE_SET", severity::error, 'D', info_path(s),
                  "a second decode submodel of batch " + std::to_string(m.batch));
        if (m.batch > k_max_decode_batch)
            c.add("D_DECODE_PROFILE_LIMIT", severity::error, 'D', info_path(s),
                  "decode batch " + std::to_string(m.batch) + " > " + std::to_string(k_max_decode_batch) +
                      ": row b's CSR is at base + 4*b and the CSRs are 0x40 apart, room for 16 rows");
        check_profile_inputs(c, s);
    }
    if (!batches.contains(1))
        c.add("D_DECODE_PROFILE_SET", severity::error, 'D', "calserve-manifest.json", "no batch-1 decode submodel");
    if (!batches.empty() && c.pkg.batch != *batches.rbegin())
        c.add("D_BATCH_MISMATCH", severity::error, 'D', "calserve-manifest.json",
              "batch " + std::to_string(c.pkg.batch) + " != largest decode profile " + std::to_string(*batches.rbegin()));
    // Sampling head (C3 extension, docs/device.md): every decode program returns top-k K
    // of a row; K must be a real cut of the vocabulary and bounded (the head sorts K).
    if (c.pkg.sampling_head_k > 0 && (c.pkg.sampling_head_k > c.pkg.vocab || c.pkg.sampling_head_k > 4096))
        c.add("D_SAMPLING_HEAD", severity::error, 'D', "calserve-manifest.json",
              "sampling head top_k " + std::to_string(c.pkg.sampling_head_k) + " outside 1..min(vocab " +
                  std::to_string(c.pkg.vocab) + ", 4096)");
}

void agree(validation_context& c, const char* code, const std::string& what, std::uint64_t want,
           const std::vector<std::pair<std::string, std::optional<std::uint64_t>>>& seen) {
    for (const auto& [where, v] : seen)
        if (v && *v != want)
            c.add(code, severity::error, 'D', where, what + " " + std::to_string(*v) + " != package " + std::to_string(want));
}

std::optional<std::uint64_t> opt(bool present, std::int64_t v) {
    return present ? std::optional<std::uint64_t>(static_cast<std::uint64_t>(std::max<std::int64_t>(v, 0))) : std::nullopt;
}

void check_vocab_batch_context(validation_context& c) {
    const auto yaml = model_yaml_name(c.pkg);
    const bool y = c.yaml.has_value();
    agree(c, "D_VOCAB_MISMATCH", "vocab", c.pkg.vocab,
          {{yaml, opt(y, y ? c.yaml->vocab : 0)},
           {"__Tokenizer/config.json", c.tok.config_vocab},
           {"reference model config.json", c.tok.reference_vocab}});
    for (auto [where, n] : {std::pair{"__Tokenizer/tokenizer.json", c.tok.vocab_entries},
                            std::pair{"__Tokenizer vocab.gguf", c.tok.gguf_tokens}})
        if (n && *n > c.pkg.vocab)
            c.add("D_VOCAB_MISMATCH", severity::error, 'D', where, std::to_string(*n) + " tokens exceed vocab " +
                                                                     std::to_string(c.pkg.vocab));
    agree(c, "D_BATCH_MISMATCH", "batch", c.pkg.batch, {{yaml, opt(y, y ? c.yaml->batch : 0)}});
    agree(c, "D_CONTEXT_MISMATCH", "context", c.pkg.context, {{yaml, opt(y, y ? c.yaml->max_seq_len : 0)}});
    for (const auto& s : c.subs) {
        const std::uint64_t batch = s.manifest->batch;
        if (s.info) {
            agree(c, "D_BATCH_MISMATCH", "batch", batch, {{info_path(s), opt(true, s.info->batch)}});
            agree(c, "D_CONTEXT_MISMATCH", "max_seq_len", c.pkg.context, {{info_path(s), opt(true, s.info->max_seq_len)}});
        }
        if (s.compile) {
            const auto f = s.manifest->dir + "/compile_config.yaml";
            agree(c, "D_BATCH_MISMATCH", "batch", batch, {{f, opt(true, s.compile->batch)}});
            agree(c, "D_CONTEXT_MISMATCH", "max_seq", c.pkg.context, {{f, opt(true, s.compile->max_seq)}});
        }
        if (s.manifest->role == submodel_role::prefill)
            if (const auto* tok = s.manifest->input("token"); tok && tok->shape.size() == 2)
                agree(c, "D_CONTEXT_MISMATCH", "prefill token width", c.pkg.context,
                      {{"calserve-manifest.json", static_cast<std::uint64_t>(tok->shape[1])}});
    }
}

void check_hparam(validation_context& c) {
    if (!c.hparam) return;
    for (const auto& [dir, v] : c.hparam->by_dir) {
        auto m = std::find_if(c.pkg.submodels.begin(), c.pkg.submodels.end(), [&](auto& x) { return x.dir == dir; });
        if (m == c.pkg.submodels.end()) continue;
        if (v.cur < 1 || v.cur > static_cast<std::int64_t>(m->max_tokens) || v.total < v.cur ||
            v.total > static_cast<std::int64_t>(c.pkg.context))
            c.add("D_HPARAM_OUT_OF_RANGE", severity::error, 'D', "hparam.yaml",
                  dir + ": cur_seq_len/past_kv_cur_seq_len outside the submodel limits");
    }
}

void resolve_context(validation_context& c) {
    auto& f = c.report->figures;
    f.context_package = c.pkg.context;
    f.context_tokenizer = static_cast<std::uint32_t>(std::min<std::uint64_t>(c.tok.model_max_length.value_or(0), UINT32_MAX));
    f.context_model = static_cast<std::uint32_t>(std::min<std::uint64_t>(c.tok.config_max_positions.value_or(0), UINT32_MAX));
    f.context_usable = c.pkg.context;
    for (auto v : {f.context_tokenizer, f.context_model})
        if (v) f.context_usable = std::min(f.context_usable, v);
    if (f.context_tokenizer != c.pkg.context || f.context_model != c.pkg.context)
        c.add("D_CONTEXT_RESOLVED", severity::info, 'D', "__Tokenizer/tokenizer_config.json",
              "tokenizer says " + std::to_string(f.context_tokenizer) + ", model config " +
                  std::to_string(f.context_model) + ", calbin " + std::to_string(c.pkg.context) +
                  "; usable context = minimum = " + std::to_string(f.context_usable));
}

void check_units(validation_context& c) {
    if (!c.reservation) return;
    const auto& text = c.reservation->device_memory_required;
    const auto bytes = memory_amount_bytes(text);
    if (!bytes)
        return c.add("D_MEMORY_UNIT_UNKNOWN", severity::error, 'D', "model_memory_reserved_info.txt",
                     "device_memory_required '" + text + "' has no known unit");
    std::uint64_t params = 0;
    for (const auto& ch : c.pkg.chips) params = std::max(params, ch.param_bytes);
    if (*bytes > static_cast<double>(k_max_plausible_device_bytes) || *bytes < static_cast<double>(params))
        c.add("D_IMPOSSIBLE_UNIT", severity::warning, 'D', "model_memory_reserved_info.txt",
              "device_memory_required: " + text + " is not a plausible per-chip amount (" + std::to_string(*bytes / 1e12) +
                  " TB); ignored for admission, capacity is computed from the parameter and KV figures");
}

void check_model_identity(validation_context& c) {
    const auto yaml = model_yaml_name(c.pkg);
    if (c.yaml && (c.yaml->type != c.pkg.architecture || c.yaml->name != c.pkg.model_name))
        c.add("D_ARCHITECTURE_MISMATCH", severity::error, 'D', yaml, "model name/type differ from the manifest");
    if (!c.tok.config_model_type.empty() && c.tok.config_model_type != c.pkg.architecture)
        c.add("D_ARCHITECTURE_MISMATCH", severity::error, 'D', "__Tokenizer/config.json",
              "model_type " + c.tok.config_model_type + " != " + c.pkg.architecture);
    if (c.reservation && c.reservation->model_name != c.pkg.model_name)
        c.add("D_ARCHITECTURE_MISMATCH", severity::error, 'D', "model_memory_reserved_info.txt", "model_name differs");
    const std::uint64_t chips = c.pkg.topo.chips;
    bool topo_ok = c.pkg.topo.tensor_parallel != 0 && c.pkg.kv.kv_heads % c.pkg.topo.tensor_parallel == 0;
    if (c.yaml) topo_ok = topo_ok && c.yaml->chip_nums == static_cast<std::int64_t>(chips) &&
                          c.yaml->calcore_nums == static_cast<std::int64_t>(c.pkg.topo.calcores_per_chip);
    if (c.reservation) topo_ok = topo_ok && c.reservation->chip_nums == static_cast<std::int64_t>(chips);
    for (const auto& s : c.subs)
        if (s.info) topo_ok = topo_ok && s.info->chip_nums == static_cast<std::int64_t>(chips);
    if (!topo_ok) c.add("D_TOPOLOGY_MISMATCH", severity::error, 'D', "", "chip/CalCore counts or TP split disagree");
    if (c.yaml && (c.yaml->tile_d0 <= 0 || c.yaml->tile_d0 != static_cast<std::int64_t>(c.pkg.layout.tile_d0)))
        c.add("D_LAYOUT_TILE", severity::error, 'D', yaml, "tile_d0 missing or different from the manifest");
}

void check_runtime_and_kv(validation_context& c) {
    if (c.pkg.runtime_name != "CalRT" || c.pkg.runtime_version != k_supported_runtime ||
        (c.version && c.version->contains("CALRT_MIN_VERSION") && c.version->at("CALRT_MIN_VERSION") != k_supported_runtime))
        c.add("D_RUNTIME_INCOMPATIBLE", severity::error, 'D', "calserve-manifest.json",
              "runtime " + c.pkg.runtime_name + " " + c.pkg.runtime_version + " (supported: CalRT 0.7.6)");
    const auto& kv = c.pkg.kv;
    bool ok = kv.context > 0 && kv.batch > 0 && kv.bytes_total == kv.bytes_per_token_total() * kv.context * kv.batch;
    if (c.yaml) ok = ok && c.yaml->layers == kv.layers && c.yaml->kv_heads == kv.kv_heads && c.yaml->head_dim == kv.head_dim;
    if (!ok) c.add("D_KV_LAYOUT_MISMATCH", severity::error, 'D', "calserve-manifest.json", "KV layout or bytes inconsistent");
    for (const auto& s : c.subs) {
        const bool helpers = s.helpers.contains("x86") && s.helpers.contains("riscv");
        if ((s.compile && s.compile->dynamic_d2d != s.manifest->dynamic_d2d) || (s.manifest->dynamic_d2d && !helpers))
            c.add("D_DYNAMIC_D2D_MISMATCH", severity::error, 'D', s.manifest->dir + "/compile_config.yaml",
                  "dynamic_d2d disagrees with the manifest or the helper libraries");
    }
}

// The manifest's `placement` (docs/package-format.md "Placement"): a known value that the
// model's shape allows over the package's chips. Experts come from the compiled model's
// config (`__Tokenizer/config.json`), layers from the KV layout.
void check_placement_field(validation_context& c) {
    const auto& p = c.pkg;
    const auto experts = static_cast<std::uint32_t>(c.tok.config_experts.value_or(0));
    if (auto r = check_placement(p.placement, p.topo.chips, p.kv.layers, experts); !r)
        c.add(known_placement(p.placement) ? "D_PLACEMENT_INCONSISTENT" : "D_PLACEMENT_UNKNOWN", severity::error, 'D',
              "calserve-manifest.json", r.error().message);
}

}  // namespace

void gate_semantics(validation_context& c) {
    check_names(c);
    for (const auto& s : c.subs) {
        check_types(c, s);
        check_logits(c, s);
    }
    check_profiles(c);
    check_vocab_batch_context(c);
    check_hparam(c);
    resolve_context(c);
    check_units(c);
    check_model_identity(c);
    check_runtime_and_kv(c);
    check_placement_field(c);
}

}  // namespace calserve::model::package
