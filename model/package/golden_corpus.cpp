// Golden corpus: write, read and compare (golden_corpus.hpp).
#include "model/package/golden_corpus.hpp"

#include <boost/json.hpp>
#include <cmath>
#include <fstream>

#include "model/cpu/transformer_greedy.hpp"

namespace calserve::model::package {

namespace json = boost::json;

namespace {

constexpr std::int64_t k_golden_top = 5;
constexpr seq_id k_golden_seq = 1;

json::array ids_json(const std::vector<token_id>& ids) {
    json::array a;
    for (auto t : ids) a.push_back(t);
    return a;
}

result<std::vector<token_id>> ids_of(const json::value* v, const std::string& where) {
    if (!v || !v->is_array()) return make_error(status::parse_error, where + ": expected an array of token ids");
    std::vector<token_id> out;
    for (const auto& t : v->get_array()) {
        if (!t.is_int64()) return make_error(status::parse_error, where + ": token ids must be integers");
        out.push_back(token_id(t.get_int64()));
    }
    return out;
}

result<golden_entry> parse_entry(const std::string& line, const std::string& where) {
    boost::system::error_code ec;
    auto v = json::parse(line, ec);
    if (ec || !v.is_object()) return make_error(status::parse_error, where + ": not a JSON object");
    const auto& o = v.get_object();
    golden_entry e;
    // A corpus written before lines named their mode is FP32: `pack` computed in no other.
    e.arith = arithmetic::fp32;
    if (const auto* mode = o.if_contains("arithmetic")) {
        const auto arith = mode->is_string() ? parse_arithmetic(std::string_view(mode->get_string())) : std::nullopt;
        if (!arith)
            return make_error(status::parse_error, where + ": \"arithmetic\" must be \"fp32\" or \"bf16\"");
        e.arith = *arith;
    }
    auto prompt = ids_of(o.if_contains("prompt"), where + " prompt");
    if (!prompt) return prompt.error();
    auto tokens = ids_of(o.if_contains("tokens"), where + " tokens");
    if (!tokens) return tokens.error();
    e.prompt = std::move(*prompt);
    e.tokens = std::move(*tokens);
    if (e.prompt.empty() || e.tokens.empty()) return make_error(status::parse_error, where + ": empty prompt or tokens");
    if (const auto* top = o.if_contains("top"); top && top->is_array()) {
        for (const auto& step : top->get_array()) {
            std::vector<std::pair<token_id, float>> s;
            if (step.is_array())
                for (const auto& pair : step.get_array())
                    if (pair.is_array() && pair.get_array().size() == 2 && pair.get_array()[0].is_int64())
                        s.emplace_back(token_id(pair.get_array()[0].get_int64()),
                                       float(json::value_to<double>(pair.get_array()[1])));
            e.top.push_back(std::move(s));
        }
    }
    return e;
}

// The served token is a near tie with the corpus' best at this step.
bool near_tie(const std::vector<std::pair<token_id, float>>& top, token_id served) {
    if (top.empty()) return false;
    const float best = top.front().second;
    for (const auto& [id, logit] : top) {
        if (id != served) continue;
        const float scale = std::max({1.0f, std::fabs(best), std::fabs(logit)});
        return best - logit <= k_golden_tie * scale;
    }
    return false;
}

}  // namespace

result<std::vector<golden_entry>> make_golden_corpus(causal_lm& lm, const std::vector<std::vector<token_id>>& prompts,
                                                     std::int64_t max_tokens, arithmetic arith) {
    std::vector<golden_entry> out;
    for (const auto& p : prompts) {
        auto run = run_greedy(lm, k_golden_seq, p, max_tokens, k_golden_top);
        if (!run) return run.error();
        golden_entry e;
        e.arith = arith;
        e.prompt = p;
        e.tokens = run->generated;
        for (auto& s : run->steps) e.top.push_back(std::move(s.top));
        out.push_back(std::move(e));
    }
    return out;
}

void_result write_golden_corpus(const std::filesystem::path& file, const std::vector<golden_entry>& corpus) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    if (!out) return make_error(status::io_error, "cannot write " + file.string());
    for (const auto& e : corpus) {
        json::array top;
        for (const auto& step : e.top) {
            json::array s;
            for (const auto& [id, logit] : step) s.push_back(json::array{id, double(logit)});
            top.push_back(std::move(s));
        }
        out << json::serialize(json::object{{"arithmetic", to_string(e.arith)}, {"prompt", ids_json(e.prompt)}, {"tokens", ids_json(e.tokens)},
                                            {"top", std::move(top)}})
            << '\n';
    }
    out.flush();
    if (!out) return make_error(status::io_error, "cannot write " + file.string());
    return {};
}

result<std::vector<golden_entry>> read_golden_corpus(const std::filesystem::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) return make_error(status::not_found, "no golden corpus at " + file.string());
    std::vector<golden_entry> out;
    std::string line;
    for (std::size_t n = 1; std::getline(in, line); ++n) {
        if (line.empty()) continue;
        auto e = parse_entry(line, file.string() + " line " + std::to_string(n));
        if (!e) return e.error();
        out.push_back(std::move(*e));
    }
    if (out.empty()) return make_error(status::parse_error, file.string() + ": the golden corpus is empty");
    return out;
}

void_result check_golden_arithmetic(const std::vector<golden_entry>& corpus, std::string_view device_arithmetic) {
    if (device_arithmetic.empty()) return {};
    for (const auto& e : corpus)
        if (to_string(e.arith) != device_arithmetic)
            return make_error(status::package_invalid, std::string("the golden corpus was computed in ") +
                                                           to_string(e.arith) + " arithmetic, the device computes in " +
                                                           std::string(device_arithmetic) +
                                                           ": its tokens may differ; regenerate the corpus in that mode");
    return {};
}

golden_verdict compare_golden(const std::vector<golden_entry>& corpus, const std::vector<std::vector<token_id>>& served) {
    golden_verdict v;
    for (std::size_t i = 0; i < corpus.size(); ++i) {
        const auto& want = corpus[i].tokens;
        const auto* got = i < served.size() ? &served[i] : nullptr;
        for (std::size_t s = 0; s < want.size(); ++s) {
            if (!got || s >= got->size()) {
                v.ok = false;
                v.reason = "entry " + std::to_string(i) + ": served " + std::to_string(got ? got->size() : 0) +
                           " tokens, the corpus has " + std::to_string(want.size());
                return v;
            }
            ++v.compared;
            if ((*got)[s] == want[s]) continue;
            if (s < corpus[i].top.size() && near_tie(corpus[i].top[s], (*got)[s])) {
                ++v.ties;
                break;
            }
            v.ok = false;
            v.reason = "entry " + std::to_string(i) + " step " + std::to_string(s) + ": expected token " +
                       std::to_string(want[s]) + ", served " + std::to_string((*got)[s]);
            return v;
        }
    }
    return v;
}

}  // namespace calserve::model::package
