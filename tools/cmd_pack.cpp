// `calserve pack`: write a synthetic calbin package from a preset.
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>
#include <memory>

#include "model/package/pack.hpp"
#include "tools/command.hpp"
#include "tools/data_paths.hpp"

namespace calserve::tools::cmd_pack {
namespace {
namespace pkg = calserve::model::package;

struct options {
    std::string preset;
    std::string out;
    std::uint64_t seed = 1;
    std::string tokenizer;
    bool full_hash = false;
    std::vector<std::uint32_t> decode_batches;
    std::string kv = "bf16";
    int sampling_head = -1;
    std::string placement = "tp";
};

int run_pack(const options& o) {
    pkg::pack_options po;
    po.preset = o.preset;
    po.out = o.out;
    po.seed = o.seed;
    po.full_hash = o.full_hash;
    po.decode_batches = o.decode_batches;
    po.s8_v_cache = o.kv == "s8v";
    po.sampling_head_k = o.sampling_head;
    po.placement = o.placement;
    auto tok = find_tokenizer(o.tokenizer);
    if (!tok) {
        std::cerr << "pack: " << tok.error().message << "\n";
        return 2;
    }
    po.tokenizer_dir = *tok;
    auto p = pkg::pack(po);
    if (!p) {
        std::cerr << "pack: " << p.error().what() << "\n";
        return p.code() == status::io_error ? 1 : 2;
    }
    std::string profiles;
    for (const auto* m : p->decode_profiles()) profiles += (profiles.empty() ? "" : ",") + std::to_string(m->batch);
    std::cout << "packed " << o.preset << " -> " << p->root.string() << " (" << p->hashes.size() << " files + "
              << pkg::k_manifest_file << ", parameters " << p->total_param_bytes() << " B, decode batches " << profiles
              << ", KV " << p->kv.batch << " x " << p->kv.context << " tokens, V " << pkg::to_string(p->kv.v_dtype)
              << ", sampling head " << (p->sampling_head_k > 0 ? "top-k " + std::to_string(p->sampling_head_k) : std::string("none"))
              << ", placement " << p->placement << ")\n";
    return 0;
}

const bool registered = register_command("pack", "write a synthetic calbin package from a preset", [](CLI::App& app) {
    auto o = std::make_shared<options>();
    std::string names;
    for (const auto& n : pkg::preset_names()) names += (names.empty() ? "" : ", ") + n;
    app.add_option("--preset", o->preset, "preset: " + names)->required();
    app.add_option("--out", o->out, "output directory (created; an old package there is replaced)")->required();
    app.add_option("--seed", o->seed, "seed for parameter bytes and binaries");
    app.add_option("--tokenizer", o->tokenizer, "tokenizer dir (default: the data lookup, README \"Where calserve finds its data\")");
    app.add_flag("--full-hash", o->full_hash, "also record full SHA-256 of multi-GiB parameter blocks");
    app.add_option("--decode-batches", o->decode_batches,
                   "decode batch profiles, e.g. 1,2,4,8,16 (ascending, from 1, at most 16; default: tiny presets "
                   "1,2,4,8,16, qwen3-30b-a3b-2chip 1)")
        ->delimiter(',');
    app.add_option("--kv-dtype", o->kv, "bf16 | s8v: V-cache as S8 with an FP32 scale per layer, KV head and position "
                                         "(the simulator runs the reference model's S8 V mode)")
        ->check(CLI::IsMember({"bf16", "s8v"}));
    app.add_option("--sampling-head", o->sampling_head,
                   "decode programs end in a sampling head returning top-k K (0 = logits only; default: tiny presets "
                   "64, qwen3-30b-a3b-2chip none)")
        ->check(CLI::Range(0, 4096));
    app.add_option("--placement", o->placement,
                   "how the model is laid over the chips, written to the manifest: tp (every layer split, the "
                   "default), ep (experts partitioned; needs an MoE model whose experts divide over the chips), pp "
                   "(layers split into stages; needs at least one layer per chip)")
        ->check(CLI::IsMember({"tp", "ep", "pp"}));
    return [o] { return run_pack(*o); };
});
}  // namespace
}  // namespace calserve::tools::cmd_pack
