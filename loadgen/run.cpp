#include "loadgen/run.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>

namespace calserve::loadgen {

const std::vector<std::int64_t>& prompt_buckets() {
    static const std::vector<std::int64_t> buckets{1, 16, 256, 1024, 2048, 4096, 8192, 16384, 32768, 40960};
    return buckets;
}

std::optional<std::int64_t> parse_token_count(std::string_view text) {
    if (text.empty()) return std::nullopt;
    std::int64_t mult = 1;
    if (text.back() == 'k' || text.back() == 'K') {
        mult = 1024;
        text.remove_suffix(1);
    }
    if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string_view::npos)
        return std::nullopt;
    const std::int64_t v = std::stoll(std::string(text)) * mult;
    if (v <= 0) return std::nullopt;
    return v;
}

std::int64_t cap_prompt(std::int64_t prompt, std::int64_t output, std::int64_t context) {
    if (context <= 0) return std::max<std::int64_t>(prompt, 1);
    return std::max<std::int64_t>(1, std::min(prompt, context - output));
}

std::vector<double> arrival_times(std::size_t n, double rate, arrival_kind kind, std::uint64_t seed) {
    std::vector<double> t(n, 0.0);
    if (kind == arrival_kind::closed || rate <= 0.0) return t;
    std::mt19937_64 gen(seed);
    double now = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
        t[i] = now;
        if (kind == arrival_kind::constant) {
            now += 1.0 / rate;
        } else {
            // Exponential gap by inversion of a 53-bit uniform in (0, 1].
            const double u = (static_cast<double>(gen() >> 11) + 1.0) / 9007199254740992.0;
            now += -std::log(u) / rate;
        }
    }
    return t;
}

std::vector<std::vector<std::int64_t>> cut_prompts(const std::vector<std::int64_t>& corpus, std::int64_t tokens,
                                                   std::size_t count, std::uint64_t seed) {
    std::vector<std::vector<std::int64_t>> out;
    if (corpus.empty() || tokens <= 0) return out;
    std::mt19937_64 gen(seed ^ 0xC0FFEEULL);
    out.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
        const std::size_t start = static_cast<std::size_t>(gen() % corpus.size());
        std::vector<std::int64_t> p;
        p.reserve(static_cast<std::size_t>(tokens));
        for (std::int64_t k = 0; k < tokens; ++k) p.push_back(corpus[(start + static_cast<std::size_t>(k)) % corpus.size()]);
        out.push_back(std::move(p));
    }
    return out;
}

std::vector<std::vector<std::int64_t>> workload_prompts(const std::vector<std::int64_t>& corpus,
                                                        const run_options& opt, std::size_t count) {
    const auto turns = static_cast<std::size_t>(std::max(1, opt.turns));
    if (turns == 1 && opt.shared_prefix <= 0) return cut_prompts(corpus, opt.prompt_tokens, count, opt.seed);
    const auto conversations = (count + turns - 1) / turns;
    const auto histories = cut_prompts(corpus, opt.prompt_tokens * std::int64_t(turns), conversations, opt.seed);
    std::vector<std::int64_t> prefix;
    if (opt.shared_prefix > 0) prefix = cut_prompts(corpus, opt.shared_prefix, 1, opt.seed ^ 0x5EEDULL).front();
    std::vector<std::vector<std::int64_t>> out;
    out.reserve(count);
    for (std::size_t i = 0; i < count && !histories.empty(); ++i) {
        const auto& h = histories[i / turns];
        auto p = prefix;
        p.insert(p.end(), h.begin(), h.begin() + std::ptrdiff_t(opt.prompt_tokens * std::int64_t(i % turns + 1)));
        out.push_back(std::move(p));
    }
    return out;
}

std::string default_corpus_text() {
    return "The harbour town woke slowly in winter. Fishing boats came in before dawn, their decks white with "
           "frost, and the men who worked them spoke little until the first coffee was poured in the cafe by the "
           "quay. The baker opened at six; by seven the queue reached the corner, and the talk was of weather, "
           "of prices at the market, and of the ferry that had missed its crossing twice that week because of the "
           "wind. Children walked to the school on the hill in pairs, kicking stones along the road and arguing "
           "about football. In the afternoons the light turned amber over the water, and old people sat on the "
           "benches outside the library reading newspapers a day late. A surveyor arrived in February with a "
           "theodolite and a box of maps, measuring the old sea wall that the council wanted to rebuild. He "
           "stayed at the inn above the chandlery, paid in cash, and wrote long letters every evening. Nobody "
           "knew whom he wrote to. When the spring storms came, the wall held, and his measurements showed that "
           "it had moved less than a finger's width in forty years. The council thanked him, argued for three "
           "months about the budget, and in the end decided to leave the wall as it was. ";
}

encoder remote_encoder(const endpoint& ep, std::chrono::milliseconds timeout) {
    return [ep, timeout](const std::string& text) { return tokenize_remote(ep, text, timeout); };
}

result<std::vector<std::int64_t>> corpus_tokens(const encoder& encode, const std::string& text,
                                                std::int64_t min_tokens) {
    auto once = encode(text);
    if (!once) return once.error();
    if (once->empty()) return make_error(status::invalid_argument, "corpus tokenizes to no tokens");
    const auto per_copy = static_cast<std::int64_t>(once->size());
    if (per_copy >= min_tokens) return once;
    std::string repeated;
    const auto copies = min_tokens / per_copy + 2;
    for (std::int64_t i = 0; i < copies; ++i) repeated += text;
    return encode(repeated);
}

namespace {

void one_request(const endpoint& ep, const std::string& label, const run_options& opt,
                 const std::vector<std::int64_t>& prompt, bench_clock::time_point origin, request_record& rec,
                 progress& prog) {
    rec.server = label;
    ++prog.in_flight;
    stream_request req{opt.model, prompt, opt.output_tokens, opt.timeout, opt.response_format};
    req.temperature = opt.temperature;
    req.seed = opt.seed * 1000003u + rec.index;
    stream_completion(ep, req, origin, rec);
    --prog.in_flight;
    if (!rec.ok) ++prog.failed;
    ++prog.done;
}

void run_closed(const endpoint& ep, const std::string& label, const run_options& opt,
                const std::vector<std::vector<std::int64_t>>& prompts, std::vector<request_record>& recs,
                bench_clock::time_point origin, progress& prog) {
    // A worker takes a whole conversation (`turns` consecutive requests) and runs its turns in order.
    const auto turns = static_cast<std::size_t>(std::max(1, opt.turns));
    std::atomic<std::size_t> next{0};
    std::vector<std::thread> workers;
    const int c = std::max(1, opt.concurrency);
    for (int w = 0; w < c; ++w) {
        workers.emplace_back([&] {
            for (std::size_t conv = next++; conv * turns < recs.size(); conv = next++) {
                for (std::size_t i = conv * turns; i < std::min(recs.size(), (conv + 1) * turns); ++i) {
                    if (turns > 1) recs[i].turn = int(i % turns) + 1;
                    one_request(ep, label, opt, prompts[i % prompts.size()], origin, recs[i], prog);
                }
            }
        });
    }
    for (auto& t : workers) t.join();
}

void run_open(const endpoint& ep, const std::string& label, const run_options& opt,
              const std::vector<std::vector<std::int64_t>>& prompts, std::vector<request_record>& recs,
              bench_clock::time_point origin, progress& prog) {
    const auto times = arrival_times(recs.size(), opt.rate, opt.arrival, opt.seed);
    const auto start = bench_clock::now();
    std::vector<std::thread> inflight;
    inflight.reserve(recs.size());
    for (std::size_t i = 0; i < recs.size(); ++i) {
        std::this_thread::sleep_until(start + std::chrono::duration_cast<bench_clock::duration>(
                                                  std::chrono::duration<double>(times[i])));
        inflight.emplace_back(
            [&, i] { one_request(ep, label, opt, prompts[i % prompts.size()], origin, recs[i], prog); });
    }
    for (auto& t : inflight) t.join();
}

}  // namespace

std::vector<request_record> run_load(const endpoint& ep, const std::string& label, const run_options& opt,
                                     const std::vector<std::vector<std::int64_t>>& prompts, int warmup,
                                     int measured, bench_clock::time_point origin, progress& prog) {
    std::vector<request_record> recs(static_cast<std::size_t>(std::max(0, warmup) + std::max(0, measured)));
    for (std::size_t i = 0; i < recs.size(); ++i) {
        recs[i].index = i;
        recs[i].warmup = static_cast<int>(i) < warmup;
    }
    if (recs.empty() || prompts.empty()) return recs;
    if (opt.arrival == arrival_kind::closed)
        run_closed(ep, label, opt, prompts, recs, origin, prog);
    else
        run_open(ep, label, opt, prompts, recs, origin, prog);
    return recs;
}

}  // namespace calserve::loadgen
