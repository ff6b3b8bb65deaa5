// Tokenizer benchmarks over a ~1 MB seeded mixed corpus (the conformance corpus's
// generators: prose, many scripts, emoji, code, numbers, whitespace, specials).
//   BM_tokenizer_encode   encode MB/s (MB = 1e6 input bytes), one thread
//   BM_tokenizer_encode_prose_code   the same on ~1 MB of English prose and code
//                         only (word-cache friendly, like most prompts)
//   BM_tokenizer_decode   decode of the same ids
//   BM_tokenizer_vs_js    the same corpus through the JavaScript peer (node,
//                         tests/model/tokenizer_peer.js) and through ours, in one
//                         run: counters cpp_MBps, js_MBps and ratio (per CPU second);
//                         /0 on the mixed corpus, /1 on prose and code
// The tokenizer directory is $CALSERVE_TOKENIZER_DIR, else <source>/.cache/
// tokenizer-qwen3 with <source> read from the build tree's CMakeCache.txt.
#include <benchmark/benchmark.h>

#include <boost/json.hpp>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <unistd.h>

#include "model/tokenizer/tokenizer.hpp"
#include "tests/model/tokenizer_corpus.hpp"

namespace {

namespace fs = std::filesystem;
using calserve::model::token_id;
using calserve::model::tokenizer;

// The source tree, found through CMakeCache.txt above the running executable.
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

struct fixture {
    std::shared_ptr<const tokenizer> tok;
    std::vector<std::string> corpus;
    std::size_t bytes = 0;
    std::string error;
};

// The seeded corpus: the conformance generators, or English prose and code only.
std::vector<std::string> make_corpus(bool prose_and_code) {
    if (!prose_and_code) return calserve::test::corpus::bench_corpus(42, 1'000'000);
    namespace corpus = calserve::test::corpus;
    corpus::rng g(43);
    std::vector<std::string> out;
    std::size_t bytes = 0;
    while (bytes < 1'000'000) {
        out.push_back(g.chance(60) ? corpus::english(g, g.between(5, 200)) : corpus::code(g));
        bytes += out.back().size();
    }
    return out;
}

fixture make_fixture(bool prose_and_code) {
    fixture r;
    auto tok = tokenizer::load(tokenizer_dir());
    if (!tok) {
        r.error = "cannot load tokenizer from " + tokenizer_dir().string() + ": " + tok.error().what();
        return r;
    }
    r.tok = tok.value();
    r.corpus = make_corpus(prose_and_code);
    for (const auto& s : r.corpus) r.bytes += s.size();
    return r;
}

const fixture& shared() {
    static const fixture f = make_fixture(false);
    return f;
}

const fixture& shared_prose_code() {
    static const fixture f = make_fixture(true);
    return f;
}

std::size_t encode_all(const fixture& f) {
    std::size_t n = 0;
    for (const auto& s : f.corpus) n += f.tok->encode(s).value().size();
    return n;
}

void BM_tokenizer_encode(benchmark::State& state) {
    const fixture& f = shared();
    if (!f.tok) return state.SkipWithError(f.error.c_str());
    std::size_t tokens = 0;
    for (auto _ : state) tokens = encode_all(f);
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * f.bytes));
    state.counters["tokens"] = static_cast<double>(tokens);
    state.counters["corpus_bytes"] = static_cast<double>(f.bytes);
}
BENCHMARK(BM_tokenizer_encode)->Unit(benchmark::kMillisecond)->MinTime(2.0);

void BM_tokenizer_encode_prose_code(benchmark::State& state) {
    const fixture& f = shared_prose_code();
    if (!f.tok) return state.SkipWithError(f.error.c_str());
    std::size_t tokens = 0;
    for (auto _ : state) tokens = encode_all(f);
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * f.bytes));
    state.counters["tokens"] = static_cast<double>(tokens);
}
BENCHMARK(BM_tokenizer_encode_prose_code)->Unit(benchmark::kMillisecond)->MinTime(2.0);

void BM_tokenizer_decode(benchmark::State& state) {
    const fixture& f = shared();
    if (!f.tok) return state.SkipWithError(f.error.c_str());
    std::vector<std::vector<token_id>> ids;
    for (const auto& s : f.corpus) ids.push_back(f.tok->encode(s).value());
    for (auto _ : state) {
        for (const auto& v : ids) benchmark::DoNotOptimize(f.tok->decode(v).value());
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * f.bytes));
}
BENCHMARK(BM_tokenizer_decode)->Unit(benchmark::kMillisecond);

double process_cpu_seconds() {
    timespec ts{};
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Runs the node peer in bench mode; returns its MB/s or a negative value.
double js_mb_per_s(const fixture& f, std::string& why) {
    fs::path peer = source_dir() / "tests" / "model" / "tokenizer_peer.js";
    fs::path corpus = fs::temp_directory_path() / ("calserve-tok-bench-" + std::to_string(::getpid()) + ".jsonl");
    {
        std::ofstream out(corpus, std::ios::binary);
        for (const auto& s : f.corpus) out << boost::json::serialize(boost::json::string(s)) << '\n';
    }
    std::string cmd = "node '" + peer.string() + "' bench '" + tokenizer_dir().string() + "' '" + corpus.string() + "' 3";
    std::string output;
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
        char buf[512];
        while (std::fgets(buf, sizeof buf, p)) output += buf;
        if (::pclose(p) != 0) output.clear();
    }
    fs::remove(corpus);
    boost::system::error_code ec;
    auto v = boost::json::parse(output, ec);
    if (ec || !v.is_object() || !v.as_object().contains("mb_per_s")) {
        why = "node peer failed (is node installed? run tools/bootstrap): " + cmd;
        return -1;
    }
    return v.as_object().at("mb_per_s").to_number<double>();
}

void BM_tokenizer_vs_js(benchmark::State& state) {
    const fixture& f = state.range(0) == 0 ? shared() : shared_prose_code();
    if (!f.tok) return state.SkipWithError(f.error.c_str());
    for (auto _ : state) {
        encode_all(f);  // warm-up, as the peer does
        // CPU time on both sides, so a loaded machine skews neither figure.
        double t0 = process_cpu_seconds();
        std::size_t passes = 0;
        double seconds = 0;
        do {
            encode_all(f);
            ++passes;
            seconds = process_cpu_seconds() - t0;
        } while (seconds < 2.0);
        double cpp = static_cast<double>(passes * f.bytes) / 1e6 / seconds;
        std::string why;
        double js = js_mb_per_s(f, why);
        if (js <= 0) return state.SkipWithError(why.c_str());
        state.counters["cpp_MBps"] = cpp;
        state.counters["js_MBps"] = js;
        state.counters["ratio"] = cpp / js;
    }
}
// Arg 0: the mixed corpus; arg 1: prose and code.
BENCHMARK(BM_tokenizer_vs_js)->Arg(0)->Arg(1)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace
