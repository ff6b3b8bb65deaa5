// `calserve make-model`: write a seeded synthetic Qwen3 checkpoint (HF layout), or a
// GGUF file of a synthetic preset or of an existing Hugging Face directory (--from).
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>
#include <memory>

#include "model/weights/gguf_model.hpp"
#include "model/weights/synthetic_model.hpp"
#include "tools/command.hpp"
#include "tools/data_paths.hpp"

namespace calserve::tools::cmd_make_model {
namespace {
struct options {
    std::string preset;
    std::string out;
    std::uint64_t seed = 1;
    std::string dtype = "bf16";
    std::string tokenizer;
    std::string format = "hf";
    std::string from;
    std::string gguf_dtype = "keep";
};

// --format gguf: the Hugging Face directory (given, or the preset written beside
// the output as OUT.hf/) converted to one GGUF file.
int write_gguf(const options& o, const std::filesystem::path& tok) {
    std::filesystem::path src = o.from;
    if (src.empty()) {
        src = o.out + ".hf";
        if (auto r = model::make_synthetic_model(o.preset, src, o.seed, o.dtype, tok); !r) {
            std::cerr << "make-model: " << r.error().what() << "\n";
            return r.code() == status::invalid_argument || r.code() == status::not_found ? 2 : 1;
        }
    }
    if (auto r = model::write_gguf_from_hf(src, o.out, o.gguf_dtype); !r) {
        std::cerr << "make-model: " << r.error().what() << "\n";
        return r.code() == status::invalid_argument || r.code() == status::not_found ? 2 : 1;
    }
    std::cout << "wrote " << o.out << " (GGUF, " << o.gguf_dtype << ") from " << src.string() << "\n";
    return 0;
}

const bool registered = register_command("make-model", "write a synthetic Qwen3 checkpoint directory", [](CLI::App& app) {
    auto o = std::make_shared<options>();
    std::string presets;
    for (const auto& p : model::synthetic_model_presets()) presets += (presets.empty() ? "" : "|") + p;
    app.add_option("--preset", o->preset, presets);
    app.add_option("--out", o->out, "output directory")->required();
    app.add_option("--seed", o->seed, "weight seed (same seed, same bytes)");
    app.add_option("--dtype", o->dtype, "f32|bf16 (f16 also accepted)");
    app.add_option("--tokenizer", o->tokenizer,
                   "directory with tokenizer.json + tokenizer_config.json to copy (default: the data lookup)");
    app.add_option("--format", o->format, "hf (a Hugging Face directory) or gguf (one GGUF file)")
        ->check(CLI::IsMember({"hf", "gguf"}));
    app.add_option("--from", o->from, "gguf: convert this Hugging Face directory instead of a preset");
    app.add_option("--gguf-dtype", o->gguf_dtype, "gguf: weight type keep|f32|bf16|f16|q8_0 (norms stay F32)");
    return [o] {
        if (o->preset.empty() && o->from.empty()) {
            std::cerr << "make-model: --preset is required (or --format gguf --from DIR)\n";
            return 2;
        }
        std::filesystem::path tok;
        if (o->from.empty()) {  // a preset: its tokenizer files come from the data lookup
            auto found = find_tokenizer(o->tokenizer);
            if (!found) {
                std::cerr << "make-model: " << found.error().message << "\n";
                return 2;
            }
            tok = *found;
        }
        if (o->format == "gguf") return write_gguf(*o, tok);
        auto r = model::make_synthetic_model(o->preset, o->out, o->seed, o->dtype, tok);
        if (!r) {
            std::cerr << "make-model: " << r.error().what() << "\n";
            return r.code() == status::invalid_argument || r.code() == status::not_found ? 2 : 1;
        }
        std::cout << "wrote " << o->preset << " (" << o->dtype << ", seed " << o->seed << ") to " << o->out << "\n";
        return 0;
    };
});
}  // namespace
}  // namespace calserve::tools::cmd_make_model
