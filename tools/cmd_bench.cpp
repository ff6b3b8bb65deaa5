// `calserve bench`: load generator and latency harness for any server streaming
// /v1/completions (loadgen/): calserve, llama.cpp's llama-server, vLLM. Prompts are
// tokenized here (--tokenizer, else the shared data lookup) and sent as token-id
// arrays, so every server gets the same prompts; --server-tokenize asks the first
// server's /tokenize instead. Open-loop Poisson or constant rate, closed-loop concurrency,
// raw per-request JSONL plus a JSON and table summary in --out DIR; --compare
// alternates the same workload between two servers and reports B/A ratios;
// --sweep AXIS=V1,V2 runs one such cell per value (each in its own subdirectory)
// and adds a sweep table; --server-log FILE joins the server's timing log by
// request id (three clocks: client, server, device).
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

#include "config/json_text.hpp"
#include "loadgen/join.hpp"
#include "loadgen/run.hpp"
#include "loadgen/sweep.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "tools/command.hpp"
#include "tools/data_paths.hpp"

namespace calserve::tools::cmd_bench {
namespace {
namespace b = loadgen;
namespace json = boost::json;

struct bench_cli {
    std::string url;
    std::string compare_url;
    std::string api_key;
    std::string arrival = "poisson";
    std::string prompt_tokens = "16";
    std::string corpus_file;
    std::string out_dir;
    std::string sweep;
    std::string tokenizer;
    bool server_tokenize = false;
    std::vector<std::string> server_logs;  // i-th belongs to the i-th server (--url, then --compare)
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
    for (const auto& r : recs) out += json_text(b::record_json(r)) + "\n";
    return out;
}

struct target {
    b::endpoint ep;
    std::string label;
    std::string model;  // --model, else this server's data[0].id
    std::vector<b::request_record> records;
};

// Runs the workload; with two targets it alternates A, B, A, B in two rounds of
// half the measured requests each so slow drift of the machine hits both alike.
void run_targets(std::vector<target>& targets, const b::run_options& opt,
                 const std::vector<std::vector<std::int64_t>>& prompts, b::progress& prog) {
    const auto origin = b::bench_clock::now();
    // Conversations are cached by the servers: a second round would replay them warm.
    const int rounds = targets.size() > 1 && opt.turns <= 1 ? 2 : 1;
    for (int round = 0; round < rounds; ++round) {
        const int measured = rounds == 1 ? opt.requests : (round == 0 ? opt.requests / 2 : opt.requests - opt.requests / 2);
        for (auto& t : targets) {
            auto per_server = opt;
            per_server.model = t.model;
            auto recs = b::run_load(t.ep, t.label, per_server, prompts, round == 0 ? opt.warmup : 0, measured, origin, prog);
            for (auto& r : recs) {
                r.index = t.records.size();
                r.round = round;
                t.records.push_back(std::move(r));
            }
        }
    }
}

std::optional<std::string> slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return std::nullopt;
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Joins each target's records with its --server-log. The server writes a line
// when a response is complete, which can be just after the client saw [DONE]:
// re-read (bounded) while ids are missing.
void join_logs(const bench_cli& cli, std::vector<target>& targets) {
    for (std::size_t i = 0; i < cli.server_logs.size() && i < targets.size(); ++i) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (true) {
            const auto text = slurp(cli.server_logs[i]);
            if (!text) std::cerr << "calserve bench: cannot read --server-log " << cli.server_logs[i] << "\n";
            const auto stats = b::join_timing(targets[i].records, b::parse_timing_log(text ? *text : ""));
            if (stats.unjoined == 0 || std::chrono::steady_clock::now() > deadline) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
    }
}

std::string title_of(const bench_cli& cli, const std::string& label, const std::string& cell) {
    return label + " " + (label == "a" ? cli.url : cli.compare_url) + (cell.empty() ? "" : " [" + cell + "]");
}

// Summaries of one cell, printed and (with --out) written to `dir`; nullopt when
// the files cannot be written.
std::optional<std::vector<b::run_summary>> report(const bench_cli& cli, std::vector<target>& targets,
                                                  const std::filesystem::path& dir, const std::string& cell) {
    std::vector<b::run_summary> sums;
    json::object summary;
    std::string table;
    std::vector<b::request_record> all;
    for (std::size_t i = 0; i < targets.size(); ++i) {
        const auto& t = targets[i];
        sums.push_back(b::summarize_run(t.records, cli.opt.objectives, cli.opt.seed));
        summary[t.label] = b::summary_json(sums.back());
        table += b::summary_table(sums.back(), title_of(cli, t.label, cell));
        table += b::turn_table(t.records, title_of(cli, t.label, cell));
        if (i < cli.server_logs.size()) {
            const auto clocks = b::summarize_clocks(t.records, cli.opt.seed);
            summary[t.label].as_object()["clocks"] = b::clocks_json(clocks);
            table += b::clocks_table(clocks, title_of(cli, t.label, cell));
        }
        all.insert(all.end(), t.records.begin(), t.records.end());
    }
    if (sums.size() == 2) {
        summary["ratios_b_over_a"] = b::compare_ratios(sums[0], sums[1]);
        table += b::compare_table(sums[0], sums[1]);
    }
    std::cout << table;
    if (!dir.empty()) {
        std::error_code ec;
        std::filesystem::create_directories(dir, ec);
        if (ec || !write_text(dir / "requests.jsonl", jsonl(all)) ||
            !write_text(dir / "summary.json", json_text(summary) + "\n") ||
            !write_text(dir / "summary.txt", table)) {
            std::cerr << "calserve bench: cannot write to " << dir << "\n";
            return std::nullopt;
        }
    }
    return sums;
}

// Picks closed or open loop from the flags (a concurrency or rate sweep sets it
// per cell); false (after a message) when neither is given.
bool choose_load(bench_cli& cli, const std::optional<b::sweep_spec>& sweep) {
    auto& opt = cli.opt;
    opt.objectives = b::slo{cli.slo_ttft_ms, cli.slo_tpot_ms};
    const auto open_kind = cli.arrival == "constant" ? b::arrival_kind::constant : b::arrival_kind::poisson;
    if (sweep && (sweep->axis == b::sweep_axis::concurrency || sweep->axis == b::sweep_axis::rate)) {
        opt.arrival = sweep->axis == b::sweep_axis::concurrency ? b::arrival_kind::closed : open_kind;
        return true;
    }
    if (cli.concurrency > 0) {
        opt.arrival = b::arrival_kind::closed;
        opt.concurrency = cli.concurrency;
        return true;
    }
    if (cli.rate > 0) {
        opt.arrival = open_kind;
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
        targets.push_back(target{*ep, targets.empty() ? "a" : "b", cli.opt.model, {}});
    }
    std::int64_t context = cli.opt.context;
    for (auto& t : targets) {
        auto info = b::fetch_server_info(t.ep, std::chrono::seconds(10));
        if (!info) {
            std::cerr << "calserve bench: server " << t.label << " unreachable or not OpenAI-compatible: "
                      << info.error().message << "\n";
            return std::nullopt;
        }
        if (t.model.empty()) t.model = info->model;
        std::cerr << "calserve bench: server " << t.label << " model " << t.model << ", context "
                  << (info->max_model_len > 0 ? std::to_string(info->max_model_len) : std::string("not stated")) << "\n";
        if (cli.opt.context == 0 && info->max_model_len > 0)
            context = context == 0 ? info->max_model_len : std::min(context, info->max_model_len);
    }
    return context;
}

std::optional<std::string> corpus_text(const bench_cli& cli) {
    if (cli.corpus_file.empty()) return b::default_corpus_text();
    auto text = slurp(cli.corpus_file);
    if (!text || text->empty()) {
        std::cerr << "calserve bench: cannot read --corpus " << cli.corpus_file << "\n";
        return std::nullopt;
    }
    return text;
}

struct cell {
    std::string name;  // empty without --sweep
    double value = 0;
    b::run_options opt;
};

// The cells to run: one per sweep value (cells above the context skipped with a
// note), or the single run; a single prompt length is capped by the context.
std::vector<cell> plan_cells(const bench_cli& cli, const std::optional<b::sweep_spec>& sweep, std::int64_t context,
                             std::vector<std::string>& skipped) {
    auto capped = cli.opt;
    const bool prompt_axis = sweep && sweep->axis == b::sweep_axis::prompt_tokens;
    const bool output_axis = sweep && sweep->axis == b::sweep_axis::output_tokens;
    if (!prompt_axis && !output_axis) {
        capped.prompt_tokens = b::cap_prompt(cli.opt.prompt_tokens, cli.opt.output_tokens, context);
        if (capped.prompt_tokens != cli.opt.prompt_tokens)
            std::cerr << "calserve bench: prompt capped to " << capped.prompt_tokens << " tokens by the context ("
                      << context << ")\n";
    }
    if (!sweep) return {cell{"", 0, capped}};
    std::vector<cell> cells;
    const auto open_kind = cli.arrival == "constant" ? b::arrival_kind::constant : b::arrival_kind::poisson;
    for (double v : sweep->values) {
        cell c{b::cell_name(sweep->axis, v), v, b::cell_options(capped, sweep->axis, v, open_kind)};
        if (!b::fits_context(c.opt.prompt_tokens, c.opt.output_tokens, context)) {
            const auto note = c.name + ": prompt " + std::to_string(c.opt.prompt_tokens) + " + output " +
                              std::to_string(c.opt.output_tokens) + " tokens exceed the server's context (" +
                              std::to_string(context) + ")";
            std::cerr << "calserve bench: skipped " << note << "\n";
            skipped.push_back(note);
            continue;
        }
        cells.push_back(std::move(c));
    }
    return cells;
}

// Runs one cell against every target; false when its files cannot be written.
bool run_cell(const bench_cli& cli, const cell& c, const std::vector<std::int64_t>& corpus,
              std::vector<target>& targets, std::vector<b::sweep_row>& rows, bool& failures) {
    const bool reuse = c.opt.turns > 1 || c.opt.shared_prefix > 0;
    const auto prompts =
        b::workload_prompts(corpus, c.opt, reuse ? std::size_t(c.opt.warmup + c.opt.requests) : 64);
    for (auto& t : targets) t.records.clear();
    b::progress prog;
    prog.total = static_cast<int>(targets.size()) * (c.opt.warmup + c.opt.requests);
    if (!c.name.empty()) std::cerr << "calserve bench: cell " << c.name << "\n";
    {
        progress_line line(prog, isatty(STDERR_FILENO) == 1);
        run_targets(targets, c.opt, prompts, prog);
    }
    join_logs(cli, targets);
    std::filesystem::path dir;
    if (!cli.out_dir.empty()) dir = c.name.empty() ? std::filesystem::path(cli.out_dir) : std::filesystem::path(cli.out_dir) / c.name;
    const auto sums = report(cli, targets, dir, c.name);
    if (!sums) return false;
    for (std::size_t i = 0; i < sums->size(); ++i) {
        if ((*sums)[i].failed > 0) failures = true;
        rows.push_back(b::sweep_row{c.name, c.value, targets[i].label, (*sums)[i]});
    }
    return true;
}

int write_sweep(const bench_cli& cli, const b::sweep_spec& spec, const std::vector<b::sweep_row>& rows,
                const std::vector<std::string>& skipped) {
    const auto table = b::sweep_table(spec, rows, skipped);
    std::cout << table;
    if (cli.out_dir.empty()) return 0;
    const std::filesystem::path dir(cli.out_dir);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec || !write_text(dir / "sweep.json", json_text(b::sweep_json(spec, rows, skipped)) + "\n") ||
        !write_text(dir / "sweep.txt", table)) {
        std::cerr << "calserve bench: cannot write to " << dir << "\n";
        return 2;
    }
    return 0;
}

// Prompts are tokenized locally unless --server-tokenize: the same ids then reach
// every server, whatever its /tokenize looks like.
std::optional<b::encoder> prompt_encoder(const bench_cli& cli, const target& first) {
    if (cli.server_tokenize) return b::remote_encoder(first.ep, std::chrono::seconds(60));
    auto dir = find_tokenizer(cli.tokenizer);
    if (!dir) {
        std::cerr << "calserve bench: " << dir.error().message << "\n";
        return std::nullopt;
    }
    auto tok = model::tokenizer::load(*dir);
    if (!tok) {
        std::cerr << "calserve bench: tokenizer " << dir->string() << ": " << tok.error().message << "\n";
        return std::nullopt;
    }
    std::shared_ptr<const model::tokenizer> shared = std::move(*tok);
    return b::encoder([shared](const std::string& text) -> result<std::vector<std::int64_t>> {
        auto ids = shared->encode(text);
        if (!ids) return ids.error();
        return std::vector<std::int64_t>(ids->begin(), ids->end());
    });
}

int run_bench(bench_cli& cli) {
    auto& opt = cli.opt;
    std::optional<b::sweep_spec> sweep;
    if (!cli.sweep.empty()) {
        auto s = b::parse_sweep(cli.sweep);
        if (!s) {
            std::cerr << "calserve bench: " << s.error().message << "\n";
            return 2;
        }
        sweep = *s;
    }
    if (!choose_load(cli, sweep)) return 2;
    if (cli.server_logs.size() > (cli.compare_url.empty() ? 1u : 2u)) {
        std::cerr << "calserve bench: more --server-log files than servers\n";
        return 2;
    }
    opt.timeout = std::chrono::milliseconds(cli.timeout_ms);
    const auto ptok = b::parse_token_count(cli.prompt_tokens);
    if (!ptok) {
        std::cerr << "calserve bench: --prompt-tokens: expected a count like 256 or 1K\n";
        return 2;
    }
    opt.prompt_tokens = *ptok;
    if (opt.turns > 1 && (opt.arrival != b::arrival_kind::closed || opt.requests % opt.turns != 0 ||
                          opt.warmup % opt.turns != 0)) {
        std::cerr << "calserve bench: --turns needs --concurrency and --requests, --warmup multiples of the turns\n";
        return 2;
    }
    std::vector<target> targets;
    const auto context = probe_targets(cli, targets);
    if (!context) return 2;
    std::vector<std::string> skipped;
    const auto cells = plan_cells(cli, sweep, *context, skipped);
    if (cells.empty()) {
        std::cerr << "calserve bench: no sweep cell fits the server's context\n";
        return 2;
    }
    std::int64_t longest = 1;
    for (const auto& c : cells) longest = std::max(longest, c.opt.prompt_tokens * c.opt.turns + c.opt.shared_prefix);
    const auto text = corpus_text(cli);
    if (!text) return 2;
    const auto encode = prompt_encoder(cli, targets.front());
    if (!encode) return 2;
    auto corpus = b::corpus_tokens(*encode, *text, longest);
    if (!corpus) {
        std::cerr << "calserve bench: " << (cli.server_tokenize ? "/tokenize" : "tokenizer") << " failed: "
                  << corpus.error().message << "\n";
        return 2;
    }
    bool failures = false;
    std::vector<b::sweep_row> rows;
    for (const auto& c : cells)
        if (!run_cell(cli, c, *corpus, targets, rows, failures)) return 2;
    if (sweep && write_sweep(cli, *sweep, rows, skipped) != 0) return 2;
    return failures ? 1 : 0;
}

const bool registered = register_command("bench", "load-test an OpenAI-compatible server", [](CLI::App& app) {
    auto cli = std::make_shared<bench_cli>();
    app.add_option("--url", cli->url, "server base URL, e.g. http://127.0.0.1:8000")->required();
    app.add_option("--compare", cli->compare_url, "second server: alternate the workload, report B/A ratios");
    app.add_option("--api-key", cli->api_key, "bearer key for both servers");
    app.add_option("--model", cli->opt.model, "model name for every server (default: each server's data[0].id)");
    auto* tok = app.add_option("--tokenizer", cli->tokenizer,
                               "tokenizer directory for the prompts (default: the data lookup, as for serve)");
    app.add_flag("--server-tokenize", cli->server_tokenize,
                 "tokenize the prompts with the first server's /tokenize instead of locally")
        ->excludes(tok);
    app.add_option("--rate", cli->rate, "open loop: requests per second");
    app.add_option("--arrival", cli->arrival, "open-loop arrivals: poisson or constant")
        ->check(CLI::IsMember({"poisson", "constant"}));
    app.add_option("--concurrency", cli->concurrency, "closed loop: requests kept in flight")->check(CLI::Range(1, 4096));
    app.add_option("--requests", cli->opt.requests, "measured requests")->check(CLI::Range(1, 10000000));
    app.add_option("--warmup", cli->opt.warmup, "warm-up requests, not counted")->check(CLI::Range(0, 1000000));
    app.add_option("--prompt-tokens", cli->prompt_tokens, "prompt length (1/16/256/1K/2K/4K/8K/16K/32K/40K), capped by the context");
    app.add_option("--output-tokens", cli->opt.output_tokens, "tokens generated per request (ignore_eos)")
        ->check(CLI::Range(1, 1 << 20));
    app.add_option("--response-format", cli->opt.response_format,
                   "JSON object sent as every request's response_format, e.g. '{\"type\":\"json_object\"}' (the "
                   "answer may end before --output-tokens when its grammar completes)")
        ->check([](const std::string& v) {
            boost::system::error_code ec;
            auto j = boost::json::parse(v, ec);
            return !ec && j.is_object() ? std::string() : std::string("--response-format: expected a JSON object");
        });
    app.add_option("--temperature", cli->opt.temperature,
                   "sampling temperature of every request (default 0, greedy); above 0 each request is seeded")
        ->check(CLI::Range(0.0, 2.0));
    app.add_option("--turns", cli->opt.turns,
                   "conversations of N turns: turn t re-sends t x --prompt-tokens of history (closed loop; "
                   "--requests and --warmup count turns, multiples of N)")
        ->check(CLI::Range(1, 1000));
    app.add_option("--shared-prefix-tokens", cli->opt.shared_prefix,
                   "the same N tokens before every prompt (a shared system prompt)")
        ->check(CLI::Range(0, 1 << 20));
    app.add_option("--context", cli->opt.context, "usable context (default: max_model_len from /v1/models)");
    app.add_option("--corpus", cli->corpus_file, "text file to cut prompts from (default: built-in prose)");
    app.add_option("--slo-ttft-ms", cli->slo_ttft_ms, "goodput SLO on time to first token");
    app.add_option("--slo-tpot-ms", cli->slo_tpot_ms, "goodput SLO on time per output token");
    app.add_option("--timeout-ms", cli->timeout_ms, "client deadline per request (a stuck stream is a failure)")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{86400000}));
    app.add_option("--seed", cli->opt.seed, "seed of arrivals, prompts and bootstrap");
    app.add_option("--out", cli->out_dir, "directory for requests.jsonl, summary.json, summary.txt");
    app.add_option("--sweep", cli->sweep,
                   "one cell per value, e.g. concurrency=1,2,4,8,16 (also prompt-tokens=, output-tokens=, rate=)");
    app.add_option("--server-log", cli->server_logs,
                   "the server's timing log (server.timing_log) to join by request id; repeat for --compare");
    return [cli] { return run_bench(*cli); };
});
}  // namespace
}  // namespace calserve::tools::cmd_bench
