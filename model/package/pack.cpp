// calserve pack: every file of the layout, sparse parameter blocks, hashes, manifest.
#include "model/package/pack.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <random>

#include "model/package/capacity.hpp"
#include "model/package/commands.hpp"
#include "model/package/golden_corpus.hpp"
#include "model/package/hashing.hpp"
#include "model/package/layout.hpp"
#include "model/package/manifest.hpp"
#include "model/package/metadata.hpp"
#include "model/package/op_map.hpp"
#include "model/weights/synthetic_model.hpp"
#include "model/cpu/transformer.hpp"

namespace calserve::model::package {

namespace fs = std::filesystem;

void_result write_file(const fs::path& root, const std::string& rel, std::string_view data) {
    const auto path = root / rel;
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    out.close();
    if (!out) return make_error(status::io_error, "cannot write " + path.string());
    return {};
}

namespace {

constexpr std::uint64_t k_param_window = 64 * 1024;

// A parameter block of the exact size: ftruncate (holes), then a seeded head and tail.
void_result write_param_block(const fs::path& path, std::uint64_t size, std::uint64_t seed) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return make_error(status::io_error, "cannot create " + path.string());
    bool ok = ::ftruncate(fd, static_cast<off_t>(size)) == 0;
    std::mt19937_64 rng(seed);
    std::string window(static_cast<std::size_t>(std::min(size, k_param_window)), '\0');
    for (auto& c : window) c = static_cast<char>(rng());
    ok = ok && ::pwrite(fd, window.data(), window.size(), 0) == static_cast<ssize_t>(window.size());
    const auto tail = static_cast<off_t>(size - window.size());
    ok = ok && ::pwrite(fd, window.data(), window.size(), tail) == static_cast<ssize_t>(window.size());
    ok = (::close(fd) == 0) && ok;
    if (!ok) return make_error(status::io_error, "cannot write " + path.string());
    return {};
}

std::string file_content(const preset_spec& s, const package& p, const layout_entry& e, std::uint64_t seed,
                         const std::vector<std::string>& sub_files) {
    switch (e.kind) {
        case file_kind::model_reservation: return write_model_reservation(s, p);
        case file_kind::hparam: return write_hparam(p);
        case file_kind::model_yaml: return write_model_yaml(s, p);
        case file_kind::op_map: return write_op_map_yaml(build_op_map(s, p, *e.sub));
        case file_kind::profparts: return write_profparts(op_sequence(s, e.sub->role, e.chip));
        case file_kind::version_py: return write_version_py(s, p);
        case file_kind::submodel_reservation: return write_submodel_info(s, p, *e.sub, sub_files);
        case file_kind::compile_config: return write_compile_config(p, *e.sub);
        case file_kind::cmd_binary:
            return write_commands_binary(build_commands(s, p, *e.sub, e.chip, e.engine, e.slot));
        case file_kind::cmd_text: return write_commands_text(build_commands(s, p, *e.sub, e.chip, e.engine, e.slot));
        case file_kind::ccu_elf: return make_elf(k_em_riscv, k_et_exec, seed ^ std::hash<std::string>{}(e.path), 16384, {});
        case file_kind::cpu_helper:
            return make_elf(e.engine == "x86" ? k_em_x86_64 : k_em_riscv, k_et_dyn,
                            seed ^ std::hash<std::string>{}(e.path), 8192, {"Process"});
        case file_kind::param_block:
        case file_kind::tokenizer: break;
    }
    return {};
}

std::vector<std::string> files_of(const std::vector<layout_entry>& layout, const submodel* m) {
    std::vector<std::string> out;
    const std::string prefix = m->dir + "/";
    for (const auto& e : layout)
        if (e.sub == m && e.path.starts_with(prefix) &&
            (e.kind == file_kind::cmd_binary || e.kind == file_kind::ccu_elf || e.kind == file_kind::cpu_helper))
            out.push_back(e.path.substr(prefix.size()));
    return out;
}

void_result prepare_out_dir(const fs::path& out) {
    std::error_code ec;
    if (fs::exists(out, ec)) {
        if (!fs::is_directory(out, ec)) return make_error(status::invalid_argument, out.string() + " is not a directory");
        const bool empty = fs::is_empty(out, ec);
        if (!empty && !fs::exists(out / k_manifest_file, ec))
            return make_error(status::invalid_argument, out.string() + " is not empty and holds no calserve package");
        if (!empty) fs::remove_all(out, ec);
    }
    fs::create_directories(out, ec);
    if (ec) return make_error(status::io_error, "cannot create " + out.string() + ": " + ec.message());
    return {};
}

void_result record_hashes(package& p, const std::vector<layout_entry>& layout, bool full_hash) {
    p.hashes.clear();
    for (const auto& e : layout) {
        hash_entry h;
        h.file = e.path;
        std::error_code ec;
        h.size = fs::file_size(p.root / e.path, ec);
        if (ec) return make_error(status::io_error, "cannot stat " + e.path);
        if (h.size >= k_big_file) {
            auto d = sparse_digest(p.root / e.path);
            if (!d) return d.error();
            h.sparse_digest = d.value();
        }
        if (h.size < k_big_file || full_hash) {
            auto f = sha256_file(p.root / e.path);
            if (!f) return f.error();
            h.sha256 = f.value();
        }
        p.hashes.push_back(std::move(h));
    }
    return {};
}

void set_command_bytes(package& p, const std::vector<layout_entry>& layout) {
    for (auto& m : p.submodels) {
        std::uint64_t per_chip_max = 0;
        for (std::uint32_t c = 0; c < p.topo.chips; ++c) {
            std::uint64_t sum = 0;
            for (const auto& e : layout)
                if (e.sub == &m && e.chip == c && (e.kind == file_kind::cmd_binary || e.kind == file_kind::ccu_elf)) {
                    std::error_code ec;
                    sum += fs::file_size(p.root / e.path, ec);
                }
            per_chip_max = std::max(per_chip_max, sum);
        }
        m.command_bytes_per_chip = per_chip_max;
    }
}

// Tiny presets take their shape from the synthetic model they carry, so the
// package's KV layout and vocabulary are the reference model's.
void_result apply_model_dims(preset_spec& s) {
    if (s.name.starts_with("qwen3")) return {};
    auto m = synthetic_preset(s.synthetic_preset);
    if (!m) return m.error();
    const auto& c = m->config;
    s.vocab = static_cast<std::uint32_t>(c.vocab_size);
    s.layers = static_cast<std::uint32_t>(c.num_hidden_layers);
    s.hidden = static_cast<std::uint32_t>(c.hidden_size);
    s.heads = static_cast<std::uint32_t>(c.num_attention_heads);
    s.kv_heads = static_cast<std::uint32_t>(c.num_key_value_heads);
    s.head_dim = static_cast<std::uint32_t>(c.head_dim);
    s.intermediate = static_cast<std::uint32_t>(c.intermediate_size);
    s.experts = static_cast<std::uint32_t>(c.num_experts);
    s.experts_per_token = static_cast<std::uint32_t>(c.num_experts_per_tok);
    s.moe_intermediate = static_cast<std::uint32_t>(c.moe_intermediate_size);
    if (s.kv_heads % s.chips != 0) return make_error(status::invalid_argument, "KV heads not divisible by chips");
    size_from_model(s);
    return {};
}

void_result apply_decode_batches(preset_spec& s, const pack_options& o) {
    if (!o.decode_batches.empty()) s.decode_batches = o.decode_batches;
    if (o.unchecked_profiles) return {};
    return check_decode_batches(s.decode_batches);
}

// The preset's layout; for the tiny presets with KV sized by the planner: as many full-context
// slots as `largest profile` rows need when each row gets the largest context at which that
// batch fits a device of the default capacities (capped by the calbin context).
package layout_of(preset_spec& s) {
    package p = build_layout(s);
    if (!s.kv_for_profiles) return p;
    s.kv_slots = kv_slots_for(p, p.batch, capacity_limits{});
    return build_layout(s);
}

// The release gate's golden corpus (golden_corpus.hpp): fixed prompts (a plain
// word, a sentence, a chat turn) and the reference model's greedy continuations,
// computed split over the package's chips as the simulator computes them.
constexpr std::int64_t k_golden_tokens = 12;

void_result write_golden(const package& p) {
    model::load_options lo;
    lo.threads = 2;
    lo.tensor_parallel = int(std::max<std::uint32_t>(1, p.topo.chips));
    lo.v_cache = p.kv.v_dtype == dtype::int8 ? model::v_cache_dtype::s8 : model::v_cache_dtype::bf16;  // as the sim runs
    lo.arith = model::arithmetic::fp32;  // the simulator's mode (docs/decisions.md, "Arithmetic")
    auto lm = model::load_causal_lm(p.reference_model_dir, lo);
    if (!lm) return lm.error();
    const std::vector<std::vector<token_id>> prompts = {
        {9707}, {785, 6722, 315, 9625, 374}, {151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198}};
    auto corpus = make_golden_corpus(**lm, prompts, k_golden_tokens, lo.arith);
    if (!corpus) return corpus.error();
    return write_golden_corpus(p.reference_model_dir / k_golden_corpus_file, *corpus);
}

void_result write_reference_model(const preset_spec& s, package& p, const pack_options& o) {
    const auto dir = p.root / "reference-model";
    if (auto r = make_synthetic_model(s.synthetic_preset, dir, o.seed, "bf16", o.tokenizer_dir); !r) return r;
    p.reference_model_dir = dir;
    return write_golden(p);
}

}  // namespace

result<package> pack(const pack_options& o) {
    auto spec = find_preset(o.preset);
    if (!spec) return make_error(status::invalid_argument, "unknown preset '" + o.preset + "'");
    if (auto r = apply_model_dims(*spec); !r) return r.error();
    if (auto r = apply_decode_batches(*spec, o); !r) return r.error();
    if (o.s8_v_cache) spec->v_dtype = dtype::int8;
    if (o.sampling_head_k > 4096) return make_error(status::invalid_argument, "sampling head top-k above 4096");
    if (o.sampling_head_k >= 0) spec->sampling_head_k = std::uint32_t(o.sampling_head_k);
    if (auto r = check_placement(o.placement, spec->chips, spec->layers, spec->experts); !r)
        return make_error(status::invalid_argument, r.error().message);
    if (auto r = prepare_out_dir(o.out); !r) return r.error();
    package p = layout_of(*spec);
    p.root = fs::absolute(o.out);
    p.placement = o.placement;
    const auto layout = expected_layout(p);
    for (const auto& e : layout) {
        if (e.kind == file_kind::tokenizer) continue;
        if (e.kind == file_kind::param_block) {
            if (auto r = write_param_block(p.root / e.path, p.params[e.chip].size_bytes, o.seed * 1000003 + e.chip); !r)
                return r.error();
            continue;
        }
        auto content = file_content(*spec, p, e, o.seed, e.sub ? files_of(layout, e.sub) : std::vector<std::string>{});
        if (auto r = write_file(p.root, e.path, content); !r) return r.error();
    }
    if (auto t = write_tokenizer_dir(*spec, p, o.tokenizer_dir, p.root); !t) return t.error();
    if (auto r = write_reference_model(*spec, p, o); !r) return r.error();
    set_command_bytes(p, layout);
    if (auto r = record_hashes(p, layout, o.full_hash); !r) return r.error();
    if (auto r = write_file(p.root, std::string(k_manifest_file), write_manifest_json(p)); !r) return r.error();
    return p;
}

void_result check_decode_batches(const std::vector<std::uint32_t>& batches) {
    auto bad = [](const std::string& m) { return make_error(status::invalid_argument, "decode batches: " + m); };
    if (batches.empty() || batches.front() != 1) return bad("the list must start with 1 (the documented decode)");
    for (std::size_t i = 1; i < batches.size(); ++i)
        if (batches[i] <= batches[i - 1]) return bad("must be strictly ascending");
    if (batches.back() > k_max_decode_batch)
        return bad(std::to_string(batches.back()) + " > " + std::to_string(k_max_decode_batch) +
                   " (one CSR per row, 4 B apart; the CSRs are 0x40 apart)");
    return {};
}

bool pack_is_current(const fs::path& dir, const std::string& preset) {
    std::error_code ec;
    if (!fs::exists(dir / k_manifest_file, ec)) return false;
    auto p = load_package(dir);
    auto spec = find_preset(preset);
    if (!p || !spec || p->preset != preset) return false;
    std::vector<std::uint32_t> batches;
    for (const auto* m : p->decode_profiles()) batches.push_back(m->batch);
    return batches == spec->decode_batches && p->placement == k_placement_tp && p->sampling_head_k == spec->sampling_head_k && fs::exists(p->reference_model_dir / k_golden_corpus_file, ec);
}

}  // namespace calserve::model::package
