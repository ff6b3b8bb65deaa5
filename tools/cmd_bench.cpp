// `calserve bench`: load generator and latency harness for any OpenAI-compatible
// server (net/bench_*): open-loop Poisson or constant rate, closed-loop concurrency,
// raw per-request JSONL plus a JSON and table summary in --out DIR; --compare
// alternates the same workload between two servers and reports B/A ratios.
// Exit codes: 0 run complete, 1 some requests failed, 2 bad usage or unreachable.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "net/bench_run.hpp"
#include "tools/command.hpp"

namespace calserve::tools {
namespace {
namespace b = net::bench;
namespace json = boost::json;

struct bench_cli {
    std::string url;
    std::string compare_url;
    std::string api_key;
    std::string arrival = "poisson";
    std::string prompt_tokens = "16";
    std::string corpus_file;
    std::string out_dir;
    double rate = 0.0;
    int concurrency = 0;
    std::int64_t timeout_ms = 600000;
    std::optional<double> slo_ttft_ms;
    std::optional<double> slo_tpot_ms;
    b::run_options opt;
};

// A one-line progress display on stderr while the load runs (terminals only).
class progress_line {
public:
    progress_line(b::progress& p, bool enabled) : p_(p) {
        if (enabled) thread_ = std::thread([this] { loop(); });
    }
    ~progress_line() {
        stop_ = true;
        if (thread_.joinable()) {
            thread_.join();
            std::fprintf(stderr, "\r\033[K");
        }
    }

private:
    void loop() {
        const auto start = std::chrono::steady_clock::now();
        while (!stop_) {
            const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            std::fprintf(stderr, "\r\033[K[bench] %d/%d done, %d in flight, %d failed, %.1f s", p_.done.load(),
                         p_.total, p_.in_flight.load(), p_.failed.load(), el);
            std::fflush(stderr);
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
    }
    b::progress& p_;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

std::optional<b::endpoint> endpoint_or_report(const std::string& url, const std::string& key) {
    auto ep = b::parse_url(url);
    if (!ep) {
        std::cerr << "calserve bench: " << ep.error().message << "\n";
        return std::nullopt;
    }
    ep->api_key = key;
    return *ep;
}

bool write_text(const std::filesystem::path& p, const std::string& text) {
    std::ofstream f(p, std::ios::binary);
    f << text;
    return static_cast<bool>(f);
}

std::string jsonl(const std::vector<b::request_record>& recs) {
    std::string out;
    for (const auto& r : recs) out += json::serialize(b::record_json(r)) + "\n";
    return out;
}

struct target {
    b::endpoint ep;
    std::string label;
    std::vector<b::request_record> records;
};

// Runs the workload; with two targets it alternates A, B, A, B in two rounds of
// half the measured requests each so slow drift of the machine hits both alike.
void run_targets(std::vector<target>& targets, const b::run_options& opt,
                 const std::vector<std::vector<std::int64_t>>& prompts, b::progress& prog) {
    const auto origin = b::bench_clock::now();
    const int rounds = targets.size() > 1 ? 2 : 1;
    for (int round = 0; round < rounds; ++round) {
        const int measured = rounds == 1 ? opt.requests : (round == 0 ? opt.requests / 2 : opt.requests - opt.requests / 2);
        for (auto& t : targets) {
            auto recs = b::run_load(t.ep, t.label, opt, prompts, round == 0 ? opt.warmup : 0, measured, origin, prog);
            for (auto& r : recs) {
                r.index = t.records.size();
                r.round = round;
                t.records.push_back(std::move(r));
            }
        }
    }
}

int report(const bench_cli& cli, std::vector<target>& targets) {
    std::vector<b::run_summary> sums;
    json::object summary;
    std::string table;
    std::vector<b::request_record> all;
    for (const auto& t : targets) {
        sums.push_back(b::summarize_run(t.records, cli.opt.objectives, cli.opt.seed));
        summary[t.label] = b::summary_json(sums.back());
        table += b::summary_table(sums.back(), t.label + " " + (t.label == "a" ? cli.url : cli.compare_url));
        all.insert(all.end(), t.records.begin(), t.records.end());
    }
    if (sums.size() == 2) {
        summary["ratios_b_over_a"] = b::compare_ratios(sums[0], sums[1]);
        table += b::compare_table(sums[0], sums[1]);
    }
    std::cout << table;
    if (!cli.out_dir.empty()) {
        const std::filesystem::path dir(cli.out_dir);
        std::error_code ec;
        std::filesystem::create_directories(dir, ec);
        if (ec || !write_text(dir / "requests.jsonl", jsonl(all)) ||
            !write_text(dir / "summary.json", json::serialize(summary) + "\n") ||
            !write_text(dir / "summary.txt", table)) {
            std::cerr << "calserve bench: cannot write to " << dir << "\n";
            return 2;
        }
    }
    for (const auto& s : sums)
        if (s.failed > 0) return 1;
    return 0;
}

// Picks closed or open loop from the flags; false (after a message) when neither.
bool choose_load(bench_cli& cli) {
    auto& opt = cli.opt;
    opt.objectives = b::slo{cli.slo_ttft_ms, cli.slo_tpot_ms};
    if (cli.concurrency > 0) {
        opt.arrival = b::arrival_kind::closed;
        opt.concurrency = cli.concurrency;
        return true;
    }
    if (cli.rate > 0) {
        opt.arrival = cli.arrival == "constant" ? b::arrival_kind::constant : b::arrival_kind::poisson;
        opt.rate = cli.rate;
        return true;
    }
    std::cerr << "calserve bench: give --rate R (open loop) or --concurrency C (closed loop)\n";
    return false;
}

// Parses the URLs and asks each server for its model and context; returns the
// usable context (smallest of the servers', or --context), or nullopt if unusable.
std::optional<std::int64_t> probe_targets(bench_cli& cli, std::vector<target>& targets) {
    for (const auto* u : {&cli.url, &cli.compare_url}) {
        if (u->empty()) continue;
        auto ep = endpoint_or_report(*u, cli.api_key);
        if (!ep) return std::nullopt;
        targets.push_back(target{*ep, targets.empty() ? "a" : "b", {}});
    }
    std::int64_t context = cli.opt.context;
    for (auto& t : targets) {
        auto info = b::fetch_server_info(t.ep, std::chrono::seconds(10));
        if (!info) {
            std::cerr << "calserve bench: server " << t.label << " unreachable or not OpenAI-compatible: "
                      << info.error().message << "\n";
            return std::nullopt;
        }
        if (cli.opt.model.empty()) cli.opt.model = info->model;
        if (cli.opt.context == 0 && info->max_model_len > 0)
            context = context == 0 ? info->max_model_len : std::min(context, info->max_model_len);
    }
    return context;
}

std::optional<std::string> corpus_text(const bench_cli& cli) {
    if (cli.corpus_file.empty()) return b::default_corpus_text();
    std::ifstream f(cli.corpus_file, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    if (!f || ss.str().empty()) {
        std::cerr << "calserve bench: cannot read --corpus " << cli.corpus_file << "\n";
        return std::nullopt;
    }
    return ss.str();
}

int run_bench(bench_cli& cli) {
    auto& opt = cli.opt;
    if (!choose_load(cli)) return 2;
    opt.timeout = std::chrono::milliseconds(cli.timeout_ms);
    const auto ptok = b::parse_token_count(cli.prompt_tokens);
    if (!ptok) {
        std::cerr << "calserve bench: --prompt-tokens: expected a count like 256 or 1K\n";
        return 2;
    }
    std::vector<target> targets;
    const auto context = probe_targets(cli, targets);
    if (!context) return 2;
    opt.prompt_tokens = b::cap_prompt(*ptok, opt.output_tokens, *context);
    if (opt.prompt_tokens != *ptok)
        std::cerr << "calserve bench: prompt capped to " << opt.prompt_tokens << " tokens by the context (" << *context
                  << ")\n";
    const auto text = corpus_text(cli);
    if (!text) return 2;
    auto corpus = b::corpus_tokens(targets.front().ep, *text, opt.prompt_tokens, std::chrono::seconds(60));
    if (!corpus) {
        std::cerr << "calserve bench: /tokenize failed: " << corpus.error().message << "\n";
        return 2;
    }
    const auto prompts = b::cut_prompts(*corpus, opt.prompt_tokens, 64, opt.seed);
    b::progress prog;
    prog.total = static_cast<int>(targets.size()) * (opt.warmup + opt.requests);
    {
        progress_line line(prog, isatty(STDERR_FILENO) == 1);
        run_targets(targets, opt, prompts, prog);
    }
    return report(cli, targets);
}

const bool registered = register_command("bench", "load-test an OpenAI-compatible server", [](CLI::App& app) {
    auto cli = std::make_shared<bench_cli>();
    app.add_option("--url", cli->url, "server base URL, e.g. http://127.0.0.1:8000")->required();
    app.add_option("--compare", cli->compare_url, "second server: alternate the workload, report B/A ratios");
    app.add_option("--api-key", cli->api_key, "bearer key for both servers");
    app.add_option("--model", cli->opt.model, "model name (default: the server's first model)");
    app.add_option("--rate", cli->rate, "open loop: requests per second");
    app.add_option("--arrival", cli->arrival, "open-loop arrivals: poisson or constant")
        ->check(CLI::IsMember({"poisson", "constant"}));
    app.add_option("--concurrency", cli->concurrency, "closed loop: requests kept in flight")->check(CLI::Range(1, 4096));
    app.add_option("--requests", cli->opt.requests, "measured requests")->check(CLI::Range(1, 10000000));
    app.add_option("--warmup", cli->opt.warmup, "warm-up requests, not counted")->check(CLI::Range(0, 1000000));
    app.add_option("--prompt-tokens", cli->prompt_tokens, "prompt length (1/16/256/1K/2K/4K/8K/16K/32K/40K), capped by the context");
    app.add_option("--output-tokens", cli->opt.output_tokens, "tokens generated per request (ignore_eos)")
        ->check(CLI::Range(1, 1 << 20));
    app.add_option("--context", cli->opt.context, "usable context (default: max_model_len from /v1/models)");
    app.add_option("--corpus", cli->corpus_file, "text file to cut prompts from (default: built-in prose)");
    app.add_option("--slo-ttft-ms", cli->slo_ttft_ms, "goodput SLO on time to first token");
    app.add_option("--slo-tpot-ms", cli->slo_tpot_ms, "goodput SLO on time per output token");
    app.add_option("--timeout-ms", cli->timeout_ms, "client deadline per request (a stuck stream is a failure)")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{86400000}));
    app.add_option("--seed", cli->opt.seed, "seed of arrivals, prompts and bootstrap");
    app.add_option("--out", cli->out_dir, "directory for requests.jsonl, summary.json, summary.txt");
    return [cli] { return run_bench(*cli); };
});
}  // namespace
}  // namespace calserve::tools
