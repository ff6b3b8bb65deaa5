// See api_compat.hpp.
#include "net/api_compat.hpp"

#include <algorithm>

#include <boost/json.hpp>

namespace calserve::net {
namespace json = boost::json;

namespace {
using maybe_error = std::optional<api_error>;

const json::value* field(const json::object& o, std::string_view name) {
    auto it = o.find(name);
    if (it == o.end() || it->value().is_null()) return nullptr;
    return &it->value();
}

// A boolean field whose `true` is not supported.
maybe_error refuse_true(const json::object& o, std::string_view name, std::string_view why) {
    const auto* v = field(o, name);
    if (!v) return std::nullopt;
    if (!v->is_bool()) return field_error(name, "expected a boolean");
    if (v->get_bool()) return field_error(name, "true is not supported: " + std::string(why));
    return std::nullopt;
}

maybe_error read_chat_fields(const json::object& o, api_request& r) {
    if (const auto* v = field(o, "add_generation_prompt")) {
        if (!v->is_bool()) return field_error("add_generation_prompt", "expected a boolean");
        r.chat.add_generation_prompt = v->get_bool();
    }
    if (auto e = refuse_true(o, "echo", "chat answers carry no prompt text; score a prompt with prompt_logprobs, or "
                                        "echo it on /v1/completions"))
        return e;
    return refuse_true(o, "continue_final_message",
                       "the chat template always closes the last message; send the text to continue as a "
                       "/v1/completions prompt");
}

maybe_error read_completion_fields(const json::object& o, api_request& r) {
    if (const auto* v = field(o, "echo")) {
        if (!v->is_bool()) return field_error("echo", "expected a boolean");
        r.echo = v->get_bool();
    }
    if (const auto* v = field(o, "suffix")) {
        if (!v->is_string()) return field_error("suffix", "expected a string");
        if (!v->get_string().empty()) return field_error("suffix", "is not supported (no insertion mode)");
    }
    return std::nullopt;
}

maybe_error read_best_of(const json::object& o, const api_request& r) {
    const auto* v = field(o, "best_of");
    if (!v) return std::nullopt;
    if (!v->is_int64() && !v->is_uint64()) return field_error("best_of", "expected an integer");
    if (!v->is_int64() || v->get_int64() != r.n) {
        return field_error("best_of",
                           "is not supported unless equal to n (" + std::to_string(r.n) +
                               "): choices are not ranked by their logprobs");
    }
    return std::nullopt;
}

maybe_error read_stream_option_fields(const json::object& o) {
    const auto* so = field(o, "stream_options");
    if (!so || !so->is_object()) return std::nullopt;  // its type is read with include_usage
    if (auto e = refuse_true(so->get_object(), "continuous_usage_stats",
                             "usage comes in the last chunk only (stream_options.include_usage)")) {
        e->param = "stream_options.continuous_usage_stats";
        e->message = "stream_options." + e->message;
        return e;
    }
    return std::nullopt;
}

// prompt_logprobs (vLLM): 0..20 alternatives per prompt token (vLLM's -1, the whole
// vocabulary, is refused: no device returns a vocabulary row per position).
maybe_error read_prompt_logprobs(const json::object& o, api_request& r) {
    const auto* v = field(o, "prompt_logprobs");
    if (!v) return std::nullopt;
    const bool integer = v->is_int64() || v->is_uint64();
    const std::int64_t n = v->is_int64() ? v->get_int64() : 0;
    if (!integer || n < 0 || n > 20 || (v->is_uint64() && !v->is_int64()))
        return field_error("prompt_logprobs", "must be an integer in [0, 20] (the alternatives per prompt token)");
    r.prompt_logprobs = static_cast<std::int32_t>(n);
    return std::nullopt;
}

// What scoring asks of the engine, and the combinations it refuses.
maybe_error settle_scoring(api_request& r) {
    const bool scores = r.echo || r.prompt_logprobs.has_value();
    if (r.score_only && !scores)
        return field_error("max_tokens", "0 generates nothing: it is accepted only to score the prompt, with echo "
                                         "(completions) or prompt_logprobs");
    if ((scores || r.score_only) && r.stream)
        return field_error("stream", "is not supported with echo, prompt_logprobs or max_tokens 0: the prompt's "
                                     "scores come with the whole answer");
    std::int32_t top = -1;
    if (r.echo && r.gen.sampling.logprobs) top = r.gen.sampling.top_logprobs;
    if (r.prompt_logprobs) top = std::max(top, *r.prompt_logprobs);
    r.gen.score_top_n = top;
    return std::nullopt;
}
}  // namespace

std::optional<api_error> read_compat_fields(const json::object& body, api_request& r) {
    if (auto e = read_prompt_logprobs(body, r)) return e;
    if (auto e = read_best_of(body, r)) return e;
    if (auto e = read_stream_option_fields(body)) return e;
    auto e = r.kind == api_kind::chat ? read_chat_fields(body, r) : read_completion_fields(body, r);
    if (e) return e;
    return settle_scoring(r);
}

}  // namespace calserve::net
