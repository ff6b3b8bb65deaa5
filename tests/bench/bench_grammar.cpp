// Grammar-engine benchmarks at the Qwen3 vocabulary (151,936 tokens): schema compile
// time, and the per-token mask and accept times while a seeded random "model" writes
// documents for a corpus of schemas (flat objects, nested arrays, enums, long strings,
// any JSON object, a tool call). Per-token times are reported as percentiles (counters
// p50_us, p99_us, max_us); docs/sampling.md keeps the figures.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "model/grammar/grammar.hpp"
#include "model/sampling/sampling.hpp"
#include "model/tokenizer/tokenizer.hpp"

namespace {

namespace fs = std::filesystem;
namespace gr = calserve::model::grammar;
using calserve::model::tokenizer;

fs::path source_dir() {
    std::error_code ec;
    fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
    for (; !dir.empty() && dir != dir.root_path(); dir = dir.parent_path()) {
        std::ifstream cache(dir / "CMakeCache.txt");
        std::string line;
        while (std::getline(cache, line)) {
            if (line.rfind("CMAKE_HOME_DIRECTORY:INTERNAL=", 0) == 0) return line.substr(line.find('=') + 1);
        }
    }
    return {};
}

fs::path tokenizer_dir() {
    if (const char* env = std::getenv("CALSERVE_TOKENIZER_DIR")) return env;
    return source_dir() / ".cache" / "tokenizer-qwen3";
}

std::shared_ptr<const gr::vocabulary> qwen3_vocab() {
    static const auto v = []() -> std::shared_ptr<const gr::vocabulary> {
        auto tok = tokenizer::load(tokenizer_dir());
        if (!tok) return nullptr;
        return gr::vocabulary::build(**tok, (*tok)->eos_token_ids());
    }();
    return v;
}

struct corpus_entry {
    const char* name;
    gr::grammar_kind kind;
    const char* text;
};

const std::vector<corpus_entry>& corpus() {
    static const std::vector<corpus_entry> c = {
        {"flat", gr::grammar_kind::json_schema,
         R"({"type":"object","properties":{"name":{"type":"string"},"email":{"type":"string"},"age":{"type":"integer"},)"
         R"("score":{"type":"number"},"active":{"type":"boolean"},"city":{"type":"string"},"zip":{"type":"string",)"
         R"("pattern":"^[0-9]{5}$"}},"required":["name","email","age","score","active","city","zip"],)"
         R"("additionalProperties":false})"},
        {"nested_arrays", gr::grammar_kind::json_schema,
         R"({"type":"object","properties":{"orders":{"type":"array","items":{"type":"object","properties":{)"
         R"("id":{"type":"integer"},"lines":{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string"},)"
         R"("qty":{"type":"integer","minimum":1,"maximum":99},"tags":{"type":"array","items":{"type":"string"}}},)"
         R"("required":["sku","qty","tags"]},"maxItems":4}},"required":["id","lines"]},"maxItems":3}},)"
         R"("required":["orders"]})"},
        {"enums", gr::grammar_kind::json_schema,
         R"({"type":"object","properties":{"color":{"enum":["red","green","blue","cyan","magenta","yellow","black",)"
         R"("white","orange","purple","brown","pink","grey","navy","teal","olive","maroon","lime","aqua","silver"]},)"
         R"("size":{"enum":["XS","S","M","L","XL","XXL"]},"unit":{"anyOf":[{"const":"metric"},{"const":"imperial"}]},)"
         R"("level":{"enum":[1,2,3,4,5,null]}},"required":["color","size","unit","level"]})"},
        {"long_strings", gr::grammar_kind::json_schema,
         R"({"type":"object","properties":{"title":{"type":"string","minLength":40},"body":{"type":"string",)"
         R"("minLength":400},"summary":{"type":["string","null"]}},"required":["title","body","summary"]})"},
        {"json_object", gr::grammar_kind::json_object, ""},
        {"tool_call", gr::grammar_kind::ebnf,
         "root ::= \"<tool_call>\\n{\\\"name\\\":\\\"get_weather\\\",\\\"arguments\\\":\" args \"}\\n</tool_call>\"\n"
         "args ::= \"{\\\"city\\\":\" str \",\\\"days\\\":\" [1-9] \"}\"\n"
         "str ::= \"\\\"\" [^\"\\\\\\x00-\\x1F]* \"\\\"\"\n"},
    };
    return c;
}

struct timings {
    std::vector<double> mask_us, accept_us;
    std::size_t documents = 0;
};

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

// One document: random logits with a pull toward structural bytes (so documents finish),
// sampled within the mask by the project's sampler, until terminated, EOS or 600 tokens.
void write_document(const std::shared_ptr<const gr::compiled>& c, const gr::vocabulary& v, std::uint64_t seed,
                    timings& t) {
    using clock = std::chrono::steady_clock;
    gr::matcher m(c);
    std::vector<std::uint32_t> mask(m.mask_words());
    std::vector<float> logits(v.size());
    std::mt19937_64 gen(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    calserve::model::sampler s;
    calserve::model::sampling_params p;
    p.temperature = 1.0f;
    calserve::model::request_rng rng(seed);
    for (int step = 0; step < 600 && !m.terminated(); ++step) {
        const auto t0 = clock::now();
        m.fill_mask(mask);
        const auto t1 = clock::now();
        t.mask_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        for (std::size_t i = 0; i < logits.size(); ++i) {
            const auto bytes = v.bytes(static_cast<std::int32_t>(i));
            const bool structural = bytes.find_first_of("\"}],") != std::string_view::npos;
            logits[i] = normal(gen) + (structural && step > 8 ? 6.0f : 0.0f) + (v.is_eos(static_cast<std::int32_t>(i)) ? 8.0f : 0.0f);
        }
        auto r = s.sample(logits, p, {}, rng, mask);
        if (!r) break;
        const auto t2 = clock::now();
        const bool ok = m.accept(r->token);
        t.accept_us.push_back(std::chrono::duration<double, std::micro>(clock::now() - t2).count());
        if (!ok || v.is_eos(r->token)) break;
    }
    ++t.documents;
}

void BM_grammar_compile(benchmark::State& state) {
    const auto vocab = qwen3_vocab();
    if (!vocab) return state.SkipWithError("no Qwen3 tokenizer (run tools/bootstrap)");
    const auto& e = corpus()[static_cast<std::size_t>(state.range(0))];
    state.SetLabel(e.name);
    for (auto _ : state) {
        gr::compile_cache cache(vocab);  // a fresh cache: every iteration compiles
        auto c = cache.get(e.kind, e.text);
        if (!c) return state.SkipWithError(c.error().what().c_str());
        benchmark::DoNotOptimize(c.value().get());
        const gr::compile_stats st = gr::stats(*c.value());
        state.counters["positions"] = static_cast<double>(st.positions);
        state.counters["ctx_tokens"] = static_cast<double>(st.context_dependent);
        state.counters["tables_MB"] = static_cast<double>(st.memory_bytes) / 1e6;
    }
}
BENCHMARK(BM_grammar_compile)->DenseRange(0, 5)->Unit(benchmark::kMillisecond);

// The whole corpus, several documents per schema; counters are per-token percentiles.
void BM_grammar_mask(benchmark::State& state) {
    const auto vocab = qwen3_vocab();
    if (!vocab) return state.SkipWithError("no Qwen3 tokenizer (run tools/bootstrap)");
    std::vector<std::shared_ptr<const gr::compiled>> grammars;
    gr::compile_cache cache(vocab);
    for (const auto& e : corpus()) {
        auto c = cache.get(e.kind, e.text);
        if (!c) return state.SkipWithError(c.error().what().c_str());
        grammars.push_back(c.value());
    }
    timings t;
    std::uint64_t seed = 1;
    for (auto _ : state) {
        for (std::size_t g = 0; g < grammars.size(); ++g) {
            timings one;
            for (int doc = 0; doc < 4; ++doc) write_document(grammars[g], *vocab, seed++, one);
            state.counters[std::string("p99_us_") + corpus()[g].name] = percentile(one.mask_us, 0.99);
            t.mask_us.insert(t.mask_us.end(), one.mask_us.begin(), one.mask_us.end());
            t.accept_us.insert(t.accept_us.end(), one.accept_us.begin(), one.accept_us.end());
            t.documents += one.documents;
        }
    }
    state.counters["tokens"] = static_cast<double>(t.mask_us.size());
    state.counters["documents"] = static_cast<double>(t.documents);
    state.counters["mask_p50_us"] = percentile(t.mask_us, 0.50);
    state.counters["mask_p99_us"] = percentile(t.mask_us, 0.99);
    state.counters["mask_max_us"] = percentile(t.mask_us, 1.0);
    state.counters["accept_p50_us"] = percentile(t.accept_us, 0.50);
    state.counters["accept_p99_us"] = percentile(t.accept_us, 0.99);
}
BENCHMARK(BM_grammar_mask)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
