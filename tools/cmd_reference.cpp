// `calserve reference`: the greedy golden corpus (prompts JSONL in, steps JSONL out),
// every line naming the arithmetic mode it was computed in; with `--routing FILE`, the
// MoE routing counts of the whole run (model/core/routing_counts.hpp, docs/twin.md).
#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "config/json_text.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "model/cpu/transformer.hpp"
#include "model/cpu/transformer_greedy.hpp"
#include "tools/command.hpp"
#include "tools/data_paths.hpp"

namespace calserve::tools::cmd_reference {
namespace {
namespace json = boost::json;

struct options {
    std::string model_dir;
    std::string prompts;
    std::string output;
    std::int64_t max_tokens = 16;
    std::int64_t top = 5;
    int threads = 2;
    int tensor_parallel = 1;
    std::string tokenizer;  // for text prompts when the model directory has no tokenizer.json
    std::string arithmetic = "fp32";  // the mode the corpus is computed in (written on every line)
    std::string routing;              // routing counts JSON; empty: not recorded
};

struct prompt {
    json::value id;
    std::vector<model::token_id> ids;
    std::optional<std::string> text;  // encoded with the model directory's tokenizer
};

// One JSONL line: {"id", "token_ids": [...]} (or "text", which needs the tokenizer).
result<prompt> parse_prompt(const std::string& line, std::size_t line_no) {
    const std::string where = "prompts line " + std::to_string(line_no) + ": ";
    boost::system::error_code ec;
    json::value v = json::parse(line, ec);
    if (ec || !v.is_object()) return make_error(status::parse_error, where + "not a JSON object");
    const auto& o = v.as_object();
    prompt p;
    p.id = o.contains("id") ? o.at("id") : json::value(static_cast<std::int64_t>(line_no));
    if (const auto* ids = o.if_contains("token_ids")) {
        if (!ids->is_array()) return make_error(status::parse_error, where + "token_ids must be an array");
        for (const auto& t : ids->as_array()) {
            if (!t.is_int64()) return make_error(status::parse_error, where + "token_ids must be integers");
            p.ids.push_back(static_cast<model::token_id>(t.as_int64()));
        }
        return p;
    }
    if (const auto* text = o.if_contains("text")) {
        if (!text->is_string()) return make_error(status::parse_error, where + "text must be a string");
        p.text = std::string(text->as_string());
        return p;
    }
    return make_error(status::parse_error, where + "needs token_ids or text");
}

// The model's own tokenizer files, else --tokenizer / the shared data lookup.
result<std::filesystem::path> tokenizer_for(const options& o) {
    const std::filesystem::path model_dir = o.model_dir;
    if (o.tokenizer.empty() && std::filesystem::exists(model_dir / "tokenizer.json")) return model_dir;
    return find_tokenizer(o.tokenizer);
}

// Text prompts: the tokenizer is loaded on first use.
result<prompt> encode_text(prompt p, const options& o, std::shared_ptr<const model::tokenizer>& tok,
                           std::size_t line_no) {
    if (!tok) {
        auto dir = tokenizer_for(o);
        if (!dir) return make_error(dir.code(), "text prompts need the tokenizer: " + dir.error().message);
        auto loaded = model::tokenizer::load(*dir);
        if (!loaded) return make_error(loaded.code(), "text prompts need the tokenizer: " + loaded.error().message);
        tok = std::move(*loaded);
    }
    auto ids = tok->encode(*p.text);
    if (!ids) return make_error(ids.code(), "prompts line " + std::to_string(line_no) + ": " + ids.error().message);
    p.ids = std::move(*ids);
    return p;
}

json::object to_json(const prompt& p, const model::greedy_run& run, model::arithmetic arith) {
    json::array prompt_ids, generated, steps;
    for (auto t : p.ids) prompt_ids.emplace_back(t);
    for (auto t : run.generated) generated.emplace_back(t);
    for (const auto& s : run.steps) {
        json::array top;
        for (const auto& [id, logit] : s.top) top.emplace_back(json::array{id, static_cast<double>(logit)});
        steps.emplace_back(json::object{{"top", std::move(top)}});
    }
    return json::object{{"id", p.id}, {"arithmetic", model::to_string(arith)}, {"prompt_ids", std::move(prompt_ids)}, {"generated_ids", std::move(generated)},
                        {"steps", std::move(steps)}};
}

// The routing table for `lm` when --routing asks for one (an MoE reference transformer).
result<std::unique_ptr<model::routing_counts>> routing_sink(const options& o, model::causal_lm& lm) {
    if (o.routing.empty()) return std::unique_ptr<model::routing_counts>{};
    auto* t = dynamic_cast<model::transformer*>(&lm);
    if (!t || t->config().num_experts <= 0)
        return make_error(status::invalid_argument, "--routing needs an MoE model (num_experts > 0)");
    const auto& c = t->config();
    auto sink = std::make_unique<model::routing_counts>(model::make_routing_counts(
        std::size_t(c.num_hidden_layers), std::size_t(c.num_experts), c.num_experts_per_tok));
    sink->model = std::filesystem::path(o.model_dir).filename().string();
    t->record_routing(sink.get());
    return sink;
}

int write_routing(const options& o, model::causal_lm& lm, const model::routing_counts& counts) {
    dynamic_cast<model::transformer&>(lm).record_routing(nullptr);
    std::ofstream out(o.routing, std::ios::trunc);
    out << model::to_json_text(counts) << "\n";
    if (!out.flush()) {
        std::cerr << "reference: cannot write " << o.routing << "\n";
        return 2;
    }
    std::cerr << "reference: routing counts of " << counts.tokens.front() << " tokens x " << counts.layers()
              << " layers -> " << o.routing << "\n";
    return 0;
}

int run(const options& o) {
    std::ifstream in(o.prompts);
    if (!in) {
        std::cerr << "reference: cannot read " << o.prompts << "\n";
        return 2;
    }
    model::load_options lo;
    lo.threads = o.threads;
    lo.tensor_parallel = o.tensor_parallel;
    lo.arith = *model::parse_arithmetic(o.arithmetic);  // checked by the option
    auto lm = model::load_causal_lm(o.model_dir, lo);
    if (!lm) {
        std::cerr << "reference: " << lm.error().what() << "\n";
        return 2;
    }
    std::ofstream out(o.output, std::ios::trunc);
    if (!out) {
        std::cerr << "reference: cannot write " << o.output << "\n";
        return 2;
    }
    auto routing = routing_sink(o, **lm);
    if (!routing) {
        std::cerr << "reference: " << routing.error().what() << "\n";
        return 2;
    }
    std::shared_ptr<const model::tokenizer> tok;
    std::string line;
    std::size_t line_no = 0, done = 0;
    while (std::getline(in, line)) {
        ++line_no;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        auto p = parse_prompt(line, line_no);
        if (p && p->text) p = encode_text(std::move(*p), o, tok, line_no);
        if (!p) {
            std::cerr << "reference: " << p.error().what() << "\n";
            return 2;
        }
        auto r = model::run_greedy(**lm, 1, p->ids, o.max_tokens, o.top);
        if (!r) {
            std::cerr << "reference: prompts line " << line_no << ": " << r.error().what() << "\n";
            return 1;
        }
        out << json_text(to_json(*p, *r, lo.arith)) << "\n";
        ++done;
    }
    std::cerr << "reference: " << done << " prompts -> " << o.output << "\n";
    if (*routing && write_routing(o, **lm, **routing) != 0) return 2;
    return out.flush() ? 0 : 1;
}

const bool registered = register_command("reference", "greedy reference corpus from a model directory", [](CLI::App& app) {
    auto o = std::make_shared<options>();
    app.add_option("--model", o->model_dir, "Hugging Face model directory or GGUF file")->required();
    app.add_option("--prompts", o->prompts, "JSONL prompts: {\"id\", \"token_ids\"} or {\"id\", \"text\"}")->required();
    app.add_option("--max-tokens", o->max_tokens, "tokens to generate per prompt")->check(CLI::Range(1, 1 << 20));
    app.add_option("--top", o->top, "top-k (id, logit) pairs recorded per step")->check(CLI::Range(0, 1000));
    app.add_option("--output", o->output, "output JSONL")->required();
    app.add_option("--threads", o->threads, "compute threads")->check(CLI::Range(1, 256));
    app.add_option("--tokenizer", o->tokenizer,
                   "tokenizer for text prompts (default: the model directory's, else the data lookup)");
    app.add_option("--arithmetic", o->arithmetic,
                   "arithmetic mode of the reference: fp32 (the simulator's and golden corpora's) or bf16; "
                   "recorded on every line")
        ->check(CLI::IsMember({"fp32", "bf16"}));
    app.add_option("--routing", o->routing,
                   "MoE: write the run's routing counts (tokens per layer per expert) to this JSON file, "
                   "for `calserve plan --placement ep --routing` (docs/twin.md)");
    app.add_option("--tp", o->tensor_parallel, "tensor-parallel shards (1 or 2)")->check(CLI::Range(1, 2));
    return [o] { return run(*o); };
});
}  // namespace
}  // namespace calserve::tools::cmd_reference
