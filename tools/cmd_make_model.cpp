// `calserve make-model`: write a seeded synthetic Qwen3 checkpoint (HF layout).
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>
#include <memory>

#include "model/synthetic_model.hpp"
#include "tools/command.hpp"
#include "tools/data_paths.hpp"

namespace calserve::tools {
namespace {
struct options {
    std::string preset;
    std::string out;
    std::uint64_t seed = 1;
    std::string dtype = "bf16";
    std::string tokenizer;
};

const bool registered = register_command("make-model", "write a synthetic Qwen3 checkpoint directory", [](CLI::App& app) {
    auto o = std::make_shared<options>();
    std::string presets;
    for (const auto& p : model::synthetic_model_presets()) presets += (presets.empty() ? "" : "|") + p;
    app.add_option("--preset", o->preset, presets)->required();
    app.add_option("--out", o->out, "output directory")->required();
    app.add_option("--seed", o->seed, "weight seed (same seed, same bytes)");
    app.add_option("--dtype", o->dtype, "f32|bf16 (f16 also accepted)");
    app.add_option("--tokenizer", o->tokenizer,
                   "directory with tokenizer.json + tokenizer_config.json to copy (default: the data lookup)");
    return [o] {
        auto tok = find_tokenizer(o->tokenizer);
        if (!tok) {
            std::cerr << "make-model: " << tok.error().message << "\n";
            return 2;
        }
        auto r = model::make_synthetic_model(o->preset, o->out, o->seed, o->dtype, *tok);
        if (!r) {
            std::cerr << "make-model: " << r.error().what() << "\n";
            return r.code() == status::invalid_argument || r.code() == status::not_found ? 2 : 1;
        }
        std::cout << "wrote " << o->preset << " (" << o->dtype << ", seed " << o->seed << ") to " << o->out << "\n";
        return 0;
    };
});
}  // namespace
}  // namespace calserve::tools
