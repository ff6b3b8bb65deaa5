// OpenAI response and chunk JSON. See openai_format.hpp.
#include "net/openai_format.hpp"

#include <algorithm>
#include <atomic>
#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <random>

#include "config/json_text.hpp"

namespace calserve::net {
namespace json = boost::json;

std::string new_request_id(api_kind kind) {
    static const std::uint64_t run_salt = [] {
        std::random_device rd;
        return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
    }();
    static std::atomic<std::uint64_t> counter{0};
    const std::uint64_t n = counter.fetch_add(1, std::memory_order_relaxed);
    // splitmix64 of the counter keeps ids unguessable-looking yet unique within the run.
    std::uint64_t z = run_salt + n * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    char buf[48];
    const char* prefix = kind == api_kind::chat ? "chatcmpl-" : kind == api_kind::responses ? "resp_" : "cmpl-";
    std::snprintf(buf, sizeof buf, "%s%016llx%08llx", prefix,
                  static_cast<unsigned long long>(z), static_cast<unsigned long long>(n & 0xffffffffULL));
    return buf;
}

std::string_view finish_reason_name(actors::finish_reason r) {
    switch (r) {
        case actors::finish_reason::stop: return "stop";
        case actors::finish_reason::length: return "length";
        case actors::finish_reason::cancelled: return "cancelled";
        case actors::finish_reason::timeout: return "timeout";
        case actors::finish_reason::error: return "error";
    }
    return "error";
}

namespace {
json::array byte_array(std::string_view s) {
    json::array a;
    for (unsigned char c : s) a.emplace_back(static_cast<std::int64_t>(c));
    return a;
}

json::object usage_json(const actors::usage& u) {
    return json::object{{"prompt_tokens", u.prompt_tokens},
                        {"completion_tokens", u.completion_tokens},
                        {"total_tokens", u.prompt_tokens + u.completion_tokens},
                        {"prompt_tokens_details", json::object{{"cached_tokens", u.cached_tokens}}}};
}
}  // namespace

struct response_builder::logprob_state {
    json::array content;         // chat: one entry per token
    json::array tokens;          // completion layout
    json::array token_logprobs;
    json::array top_logprobs;
    json::array text_offset;
};

response_builder::response_builder(api_kind kind, std::string id, std::string model, bool include_usage,
                                   const model::sampling_params& sampling, token_text_fn token_text)
    : kind_(kind), id_(std::move(id)), model_(std::move(model)),
      created_(std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch()).count()),
      include_usage_(include_usage), logprobs_(sampling.logprobs), token_text_(std::move(token_text)),
      lp_(std::make_unique<logprob_state>()) {}

response_builder::~response_builder() = default;

struct response_builder::parsed_message {
    std::string reasoning;
    std::string content;
    json::array tool_calls;
};

void response_builder::parse_output(bool reasoning, bool tools) {
    if (kind_ != api_kind::chat || (!reasoning && !tools)) return;
    // Call ids: "call_" + the request id's random part + the call's index.
    std::string tail = id_.substr(id_.find('-') + 1);
    parser_ = std::make_unique<model::chat_output_parser>(model::chat_output_options{reasoning, tools, "call_" + tail + "_"});
    parsed_ = std::make_unique<parsed_message>();
}

std::string response_builder::finish_name(actors::finish_reason r) const {
    if (r == actors::finish_reason::stop && parser_ && parser_->tool_calls() > 0) return "tool_calls";
    return std::string(finish_reason_name(r));
}

namespace {
json::array tool_call_deltas(const model::chat_delta& d) {
    json::array calls;
    for (const auto& t : d.tool_calls) {
        json::object fn{{"arguments", t.arguments}};
        json::object c{{"index", t.index}};
        if (t.opens) {
            c["id"] = t.id;
            c["type"] = "function";
            fn = json::object{{"name", t.name}, {"arguments", t.arguments}};
        }
        c["function"] = std::move(fn);
        calls.push_back(std::move(c));
    }
    return calls;
}
}  // namespace

void response_builder::absorb(const model::chat_delta& d) {
    parsed_->reasoning += d.reasoning;
    parsed_->content += d.content;
    for (const auto& t : d.tool_calls) {
        if (t.opens) {
            parsed_->tool_calls.push_back(json::object{
                {"id", t.id}, {"type", "function"}, {"function", json::object{{"name", t.name}, {"arguments", ""}}}});
        }
        auto& fn = parsed_->tool_calls.at(t.index).as_object()["function"].as_object();
        fn["arguments"] = std::string(fn["arguments"].as_string()) + t.arguments;
    }
}

std::string response_builder::parsed_chunk(const model::chat_delta& d, json::value* logprobs,
                                           std::string_view finish) {
    json::object delta;
    if (!role_sent_) {
        delta["role"] = "assistant";
        role_sent_ = true;
    }
    if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
    if (!d.content.empty()) delta["content"] = d.content;
    if (!d.tool_calls.empty()) delta["tool_calls"] = tool_call_deltas(d);
    json::object choice{{"index", index_}, {"delta", std::move(delta)}};
    if (logprobs) choice["logprobs"] = std::move(*logprobs);
    else choice["logprobs"] = nullptr;
    if (finish.empty()) choice["finish_reason"] = nullptr;
    else choice["finish_reason"] = finish;
    json::object out{{"id", id_}, {"object", "chat.completion.chunk"}, {"created", created_}, {"model", model_}};
    out["choices"] = json::array{std::move(choice)};
    if (include_usage_) out["usage"] = nullptr;
    return json_text(out);
}

// Returns the chunk's logprobs for one token and appends the token to the aggregate.
// Kept as values to the end (never text parsed back): a logprob keeps its bits.
json::value response_builder::logprobs_for(const actors::generated_token& t) {
    auto text_of = [&](actors::token_id id) { return token_text_ ? token_text_(id) : std::string(); };
    const std::string tok = token_text_ ? text_of(t.token) : t.text;
    if (kind_ == api_kind::chat) {
        json::array top;
        for (const auto& alt : t.top) {
            std::string s = text_of(alt.token);
            top.push_back(json::object{{"token", s}, {"logprob", alt.logprob}, {"bytes", byte_array(s)}});
        }
        json::object entry{{"token", tok}, {"logprob", t.logprob}, {"bytes", byte_array(tok)}};
        entry["top_logprobs"] = std::move(top);
        lp_->content.push_back(entry);
        return json::object{{"content", json::array{entry}}};
    }
    json::object top;
    for (const auto& alt : t.top) top[text_of(alt.token)] = alt.logprob;
    lp_->tokens.push_back(json::string(tok));
    lp_->token_logprobs.push_back(t.logprob);
    lp_->top_logprobs.push_back(top);
    lp_->text_offset.push_back(text_offset_);
    json::object chunk{{"tokens", json::array{json::string(tok)}},
                       {"token_logprobs", json::array{t.logprob}},
                       {"top_logprobs", json::array{top}},
                       {"text_offset", json::array{text_offset_}}};
    return chunk;
}

std::string response_builder::chunk(std::string_view text, json::value* logprobs, std::string_view finish) {
    json::object choice{{"index", index_}};
    if (kind_ == api_kind::chat) {
        json::object delta;
        if (!role_sent_) {
            delta["role"] = "assistant";
            role_sent_ = true;
        }
        if (!text.empty() || finish.empty()) delta["content"] = text;
        choice["delta"] = std::move(delta);
    } else {
        choice["text"] = text;
    }
    if (logprobs) choice["logprobs"] = std::move(*logprobs);
    else choice["logprobs"] = nullptr;
    if (finish.empty()) choice["finish_reason"] = nullptr;
    else choice["finish_reason"] = finish;
    json::object out{{"id", id_},
                     {"object", kind_ == api_kind::chat ? "chat.completion.chunk" : "text_completion"},
                     {"created", created_},
                     {"model", model_}};
    out["choices"] = json::array{std::move(choice)};
    if (include_usage_) out["usage"] = nullptr;
    return json_text(out);
}

std::string response_builder::token_chunk(const actors::generated_token& t) {
    if (parser_) {
        auto d = parser_->push(t.text);
        text_offset_ += static_cast<std::int64_t>(t.text.size());
        if (logprobs_) {
            json::value lp = logprobs_for(t);
            return parsed_chunk(d, &lp, {});
        }
        if (d.empty() && role_sent_) return {};
        return parsed_chunk(d, nullptr, {});
    }
    if (logprobs_) {
        json::value lp = logprobs_for(t);
        std::string out = chunk(t.text, &lp, {});
        text_offset_ += static_cast<std::int64_t>(t.text.size());
        return out;
    }
    text_offset_ += static_cast<std::int64_t>(t.text.size());
    if (t.text.empty() && role_sent_) return {};
    return chunk(t.text, nullptr, {});
}

std::string response_builder::finish_chunk(const actors::generation_result& r) {
    if (parser_) {
        auto d = parser_->push(r.tail_text);
        auto rest = parser_->finish();
        d.reasoning += rest.reasoning;
        d.content += rest.content;
        for (auto& t : rest.tool_calls) d.tool_calls.push_back(std::move(t));
        return parsed_chunk(d, nullptr, finish_name(r.reason));
    }
    return chunk(r.tail_text, nullptr, finish_reason_name(r.reason));
}

std::string response_builder::usage_chunk(const actors::usage& u) const {
    json::object out{{"id", id_},
                     {"object", kind_ == api_kind::chat ? "chat.completion.chunk" : "text_completion"},
                     {"created", created_},
                     {"model", model_},
                     {"choices", json::array{}}};
    out["usage"] = usage_json(u);
    return json_text(out);
}

void response_builder::add_token(const actors::generated_token& t) {
    if (logprobs_) (void)logprobs_for(t);
    if (parser_) absorb(parser_->push(t.text));
    text_ += t.text;
    text_offset_ += static_cast<std::int64_t>(t.text.size());
}

std::string response_builder::final_response(const actors::generation_result& r) {
    return json_text(final_object(r));
}

// echo: the prompt text before the completion's, and (with logprobs) each prompt token
// with its score (the first has none: null), the completion's offsets moved past it.
void response_builder::echo_prompt(const actors::generation_result& r) {
    const auto& sc = scoring_;
    text_ = sc.prompt_text + text_;
    if (!logprobs_) return;
    json::array tokens, logprobs, tops, offsets;
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < sc.prompt.size(); ++i) {
        std::string tok = token_text_ ? token_text_(sc.prompt[i]) : std::string();
        const bool scored = i > 0 && i < r.prompt_scores.size();
        logprobs.push_back(scored ? json::value(r.prompt_scores[i].logprob) : json::value(nullptr));
        if (scored) {
            json::object top;
            for (const auto& alt : r.prompt_scores[i].top) top[token_text_ ? token_text_(alt.token) : std::string()] = alt.logprob;
            tops.push_back(std::move(top));
        } else {
            tops.push_back(nullptr);
        }
        offsets.push_back(offset);
        offset += std::int64_t(tok.size());
        tokens.push_back(json::string(tok));
    }
    const auto shift = std::int64_t(sc.prompt_text.size());
    for (auto& v : lp_->text_offset) v = v.as_int64() + shift;
    for (auto& v : lp_->tokens) tokens.push_back(std::move(v));
    for (auto& v : lp_->token_logprobs) logprobs.push_back(std::move(v));
    for (auto& v : lp_->top_logprobs) tops.push_back(std::move(v));
    for (auto& v : lp_->text_offset) offsets.push_back(std::move(v));
    lp_->tokens = std::move(tokens);
    lp_->token_logprobs = std::move(logprobs);
    lp_->top_logprobs = std::move(tops);
    lp_->text_offset = std::move(offsets);
}

// vLLM's prompt_logprobs: null for the first prompt token, then per token an object keyed
// by token id: the prompt token and its alternatives, each {logprob, rank, decoded_token};
// rank is the place among the alternatives (1 = most likely), null for a prompt token
// that is not among them.
json::value response_builder::prompt_logprobs_json(const actors::generation_result& r) const {
    const auto& sc = scoring_;
    json::array out;
    for (std::size_t i = 0; i < sc.prompt.size(); ++i) {
        if (i == 0 || i >= r.prompt_scores.size()) {
            out.push_back(nullptr);
            continue;
        }
        const auto& score = r.prompt_scores[i];
        auto text_of = [&](actors::token_id t) { return token_text_ ? token_text_(t) : std::string(); };
        json::object entry;
        json::value rank = nullptr;
        const auto shown = std::min<std::size_t>(score.top.size(), std::size_t(std::max(0, *sc.prompt_logprobs)));
        for (std::size_t k = 0; k < score.top.size(); ++k)
            if (score.top[k].token == sc.prompt[i]) rank = std::int64_t(k + 1);
        entry[std::to_string(sc.prompt[i])] =
            json::object{{"logprob", score.logprob}, {"rank", rank}, {"decoded_token", text_of(sc.prompt[i])}};
        for (std::size_t k = 0; k < shown; ++k) {
            const auto& alt = score.top[k];
            entry[std::to_string(alt.token)] = json::object{
                {"logprob", alt.logprob}, {"rank", std::int64_t(k + 1)}, {"decoded_token", text_of(alt.token)}};
        }
        out.push_back(std::move(entry));
    }
    return out;
}

json::object response_builder::final_object(const actors::generation_result& r) {
    text_ += r.tail_text;
    if (scoring_.echo && kind_ == api_kind::completion) echo_prompt(r);
    json::value lp = nullptr;
    if (logprobs_) {
        if (kind_ == api_kind::chat) {
            lp = json::object{{"content", std::move(lp_->content)}};
        } else {
            lp = json::object{{"tokens", std::move(lp_->tokens)},
                              {"token_logprobs", std::move(lp_->token_logprobs)},
                              {"top_logprobs", std::move(lp_->top_logprobs)},
                              {"text_offset", std::move(lp_->text_offset)}};
        }
    }
    json::object choice{{"index", index_}};
    if (parser_) {
        absorb(parser_->push(r.tail_text));
        absorb(parser_->finish());
        json::object message{{"role", "assistant"}};
        const bool calls = !parsed_->tool_calls.empty();
        if (calls && parsed_->content.empty()) message["content"] = nullptr;
        else message["content"] = parsed_->content;
        if (!parsed_->reasoning.empty()) message["reasoning_content"] = parsed_->reasoning;
        if (calls) message["tool_calls"] = std::move(parsed_->tool_calls);
        choice["message"] = std::move(message);
    } else if (kind_ == api_kind::chat) {
        choice["message"] = json::object{{"role", "assistant"}, {"content", text_}};
    } else {
        choice["text"] = text_;
    }
    choice["logprobs"] = std::move(lp);
    choice["finish_reason"] = finish_name(r.reason);
    const bool prompt_lp = scoring_.prompt_logprobs.has_value();
    if (prompt_lp && kind_ != api_kind::chat) choice["prompt_logprobs"] = prompt_logprobs_json(r);
    json::object out{{"id", id_},
                     {"object", kind_ == api_kind::chat ? "chat.completion" : "text_completion"},
                     {"created", created_},
                     {"model", model_}};
    out["choices"] = json::array{std::move(choice)};
    if (prompt_lp && kind_ == api_kind::chat) out["prompt_logprobs"] = prompt_logprobs_json(r);
    out["usage"] = usage_json(r.tokens);
    return out;
}

std::string combine_choices(std::vector<json::object> finals, const actors::usage& total) {
    auto& out = finals.front();
    json::array choices;
    choices.reserve(finals.size());
    for (auto& f : finals) {
        for (auto& c : f["choices"].as_array()) choices.push_back(std::move(c));
    }
    out["choices"] = std::move(choices);
    out["usage"] = usage_json(total);
    return json_text(out);
}

}  // namespace calserve::net
