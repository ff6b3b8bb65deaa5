// Request-body validation for /v1/completions, /v1/chat/completions and WebSocket
// `generate`. Every check names its field. See api_params.hpp.
#include "net/api_params.hpp"

#include "net/api_compat.hpp"
#include "net/api_output.hpp"
#include "net/output_constraint.hpp"
#include "actors/schedule_policy.hpp"

#include <boost/json.hpp>
#include <charconv>
#include <cmath>

namespace calserve::net {
namespace json = boost::json;

namespace {
using maybe_error = std::optional<api_error>;

constexpr std::size_t k_max_stop_strings = 16;
constexpr std::size_t k_max_logit_bias = 1024;
constexpr std::int32_t k_max_top_logprobs = 20;

const json::value* field(const json::object& o, std::string_view name) {
    auto it = o.find(name);
    if (it == o.end() || it->value().is_null()) return nullptr;  // null means "not given"
    return &it->value();
}

std::optional<double> as_number(const json::value& v) {
    if (v.is_double()) return v.get_double();
    if (v.is_int64()) return static_cast<double>(v.get_int64());
    if (v.is_uint64()) return static_cast<double>(v.get_uint64());
    return std::nullopt;
}

std::optional<std::int64_t> as_integer(const json::value& v) {
    if (v.is_int64()) return v.get_int64();
    if (v.is_uint64() && v.get_uint64() <= static_cast<std::uint64_t>(INT64_MAX)) {
        return static_cast<std::int64_t>(v.get_uint64());
    }
    if (v.is_double()) {
        double d = v.get_double();
        if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) return static_cast<std::int64_t>(d);
    }
    return std::nullopt;
}

std::string number_text(double d) {
    char buf[32];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);
    return ec == std::errc{} ? std::string(buf, end) : std::string("?");
}

// Reads an optional number in [lo, hi] (open at lo when lo_open).
maybe_error read_number(const json::object& o, std::string_view name, double lo, double hi, bool lo_open,
                        float& out) {
    const auto* v = field(o, name);
    if (!v) return std::nullopt;
    auto d = as_number(*v);
    if (!d) return field_error(name, "expected a number");
    bool low_ok = lo_open ? *d > lo : *d >= lo;
    if (!std::isfinite(*d) || !low_ok || *d > hi) {
        return field_error(name, "must be in " + std::string(lo_open ? "(" : "[") + number_text(lo) + ", " +
                                     number_text(hi) + "], got " + number_text(*d));
    }
    out = static_cast<float>(*d);
    return std::nullopt;
}

maybe_error read_integer(const json::object& o, std::string_view name, std::int64_t lo, std::int64_t hi,
                         std::optional<std::int64_t>& out) {
    const auto* v = field(o, name);
    if (!v) return std::nullopt;
    auto i = as_integer(*v);
    if (!i) return field_error(name, "expected an integer");
    if (*i < lo || *i > hi) {
        return field_error(name, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                                     std::to_string(*i));
    }
    out = *i;
    return std::nullopt;
}

maybe_error read_bool(const json::object& o, std::string_view name, bool& out) {
    const auto* v = field(o, name);
    if (!v) return std::nullopt;
    if (!v->is_bool()) return field_error(name, "expected a boolean");
    out = v->get_bool();
    return std::nullopt;
}

maybe_error read_token_ids(const json::array& a, std::string_view name, const parse_limits& limits,
                           std::vector<actors::token_id>& out) {
    for (std::size_t i = 0; i < a.size(); ++i) {
        auto id = as_integer(a[i]);
        std::string at = std::string(name) + "[" + std::to_string(i) + "]";
        if (!id) return field_error(at, "expected an integer token id");
        if (*id < 0 || (limits.vocab_size > 0 && *id >= limits.vocab_size)) {
            return field_error(at, "token id " + std::to_string(*id) + " outside the vocabulary [0, " +
                                       std::to_string(limits.vocab_size) + ")");
        }
        out.push_back(static_cast<actors::token_id>(*id));
    }
    return std::nullopt;
}

maybe_error read_prompt(const json::object& o, const parse_limits& limits, api_request& r) {
    const auto* v = field(o, "prompt");
    if (!v) return field_error("prompt", "is required");
    if (v->is_string()) {
        r.prompt = std::string(v->get_string());
        return std::nullopt;
    }
    if (!v->is_array()) return field_error("prompt", "expected a string or an array of token ids");
    const auto& a = v->get_array();
    if (a.empty()) return field_error("prompt", "must not be empty");
    if (a.size() == 1 && a[0].is_string()) {
        r.prompt = std::string(a[0].get_string());
        return std::nullopt;
    }
    if (a[0].is_string() || a[0].is_array()) return field_error("prompt", "batches of prompts are not supported");
    std::vector<actors::token_id> ids;
    if (auto e = read_token_ids(a, "prompt", limits, ids)) return e;
    r.prompt = std::move(ids);
    return std::nullopt;
}

maybe_error read_content(const json::value& c, const std::string& at, std::string& out) {
    if (c.is_string()) {
        out = std::string(c.get_string());
        return std::nullopt;
    }
    if (!c.is_array()) return field_error(at, "expected a string or an array of text parts");
    for (std::size_t i = 0; i < c.get_array().size(); ++i) {
        const auto& part = c.get_array()[i];
        std::string pat = at + "[" + std::to_string(i) + "]";
        if (!part.is_object()) return field_error(pat, "expected an object");
        const auto* type = field(part.get_object(), "type");
        const auto* text = field(part.get_object(), "text");
        if (!type || !type->is_string() || type->get_string() != "text") {
            return field_error(pat + ".type", "only \"text\" parts are supported");
        }
        if (!text || !text->is_string()) return field_error(pat + ".text", "expected a string");
        out += text->get_string();
    }
    return std::nullopt;
}

maybe_error read_messages(const json::object& o, api_request& r) {
    const auto* v = field(o, "messages");
    if (!v) return field_error("messages", "is required");
    if (!v->is_array()) return field_error("messages", "expected an array of messages");
    if (v->get_array().empty()) return field_error("messages", "must not be empty");
    std::vector<actors::chat_message> msgs;
    for (std::size_t i = 0; i < v->get_array().size(); ++i) {
        const auto& m = v->get_array()[i];
        std::string at = "messages[" + std::to_string(i) + "]";
        if (!m.is_object()) return field_error(at, "expected an object");
        const auto* role = field(m.get_object(), "role");
        if (!role || !role->is_string()) return field_error(at + ".role", "expected a string");
        std::string_view rs = role->get_string();
        if (rs != "system" && rs != "user" && rs != "assistant" && rs != "tool" && rs != "developer") {
            return field_error(at + ".role", "must be system, user, assistant, tool or developer");
        }
        actors::chat_message cm;
        cm.role = std::string(rs == "developer" ? "system" : rs);
        if (auto e = read_message_extras(m.get_object(), at, cm)) return e;
        const auto* content = field(m.get_object(), "content");
        // An assistant turn that only calls tools may have null content.
        if (!content && !(rs == "assistant" && !cm.tool_calls.empty())) return field_error(at + ".content", "is required");
        if (content) {
            if (auto e = read_content(*content, at + ".content", cm.content)) return e;
        }
        msgs.push_back(std::move(cm));
    }
    r.prompt = std::move(msgs);
    return std::nullopt;
}

maybe_error read_stop(const json::object& o, api_request& r) {
    if (const auto* v = field(o, "stop")) {
        if (v->is_string()) {
            if (!v->get_string().empty()) r.gen.stop.emplace_back(v->get_string());
        } else if (v->is_array()) {
            if (v->get_array().size() > k_max_stop_strings) {
                return field_error("stop", "at most " + std::to_string(k_max_stop_strings) + " stop strings");
            }
            for (std::size_t i = 0; i < v->get_array().size(); ++i) {
                const auto& s = v->get_array()[i];
                std::string at = "stop[" + std::to_string(i) + "]";
                if (!s.is_string()) return field_error(at, "expected a string");
                // An empty stop string can never match: ignored here as in the string form.
                if (!s.get_string().empty()) r.gen.stop.emplace_back(s.get_string());
            }
        } else {
            return field_error("stop", "expected a string or an array of strings");
        }
    }
    return std::nullopt;
}

maybe_error read_stop_ids(const json::object& o, const parse_limits& limits, api_request& r) {
    const auto* v = field(o, "stop_token_ids");
    if (!v) return std::nullopt;
    if (!v->is_array()) return field_error("stop_token_ids", "expected an array of token ids");
    return read_token_ids(v->get_array(), "stop_token_ids", limits, r.gen.stop_token_ids);
}

maybe_error read_logit_bias(const json::object& o, const parse_limits& limits, api_request& r) {
    const auto* v = field(o, "logit_bias");
    if (!v) return std::nullopt;
    if (!v->is_object()) return field_error("logit_bias", "expected an object of token id -> bias");
    if (v->get_object().size() > k_max_logit_bias) return field_error("logit_bias", "too many entries");
    for (const auto& kv : v->get_object()) {
        std::string key(kv.key());
        std::string at = "logit_bias." + key;
        // Exactly the decimal id: no sign, no surrounding space (" 5" and "5 " alike).
        std::int64_t id = -1;
        auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
        if (key.empty() || ec != std::errc{} || end != key.data() + key.size() || id < 0 ||
            (limits.vocab_size > 0 && id >= limits.vocab_size)) {
            return field_error(at, "key must be a token id in the vocabulary");
        }
        auto bias = as_number(kv.value());
        if (!bias) return field_error(at, "expected a number");
        if (!(*bias >= -100.0 && *bias <= 100.0)) return field_error(at, "bias must be in [-100, 100]");
        r.gen.sampling.logit_bias.emplace_back(static_cast<std::int32_t>(id), static_cast<float>(*bias));
    }
    return std::nullopt;
}

maybe_error read_logprobs(api_kind kind, const json::object& o, api_request& r) {
    auto& s = r.gen.sampling;
    if (kind == api_kind::completion) {
        std::optional<std::int64_t> n;
        if (auto e = read_integer(o, "logprobs", 0, k_max_top_logprobs, n)) return e;
        if (n) {
            s.logprobs = true;
            s.top_logprobs = static_cast<std::int32_t>(*n);
        }
        return std::nullopt;
    }
    if (auto e = read_bool(o, "logprobs", s.logprobs)) return e;
    std::optional<std::int64_t> top;
    if (auto e = read_integer(o, "top_logprobs", 0, k_max_top_logprobs, top)) return e;
    if (top) {
        if (!s.logprobs) return field_error("top_logprobs", "requires logprobs to be true");
        s.top_logprobs = static_cast<std::int32_t>(*top);
    }
    return std::nullopt;
}

maybe_error read_sampling(const json::object& o, const parse_limits& limits, api_request& r) {
    auto& s = r.gen.sampling;
    if (auto e = read_number(o, "temperature", 0, 2, false, s.temperature)) return e;
    if (auto e = read_number(o, "top_p", 0, 1, true, s.top_p)) return e;
    if (auto e = read_number(o, "min_p", 0, 1, false, s.min_p)) return e;
    if (auto e = read_number(o, "presence_penalty", -2, 2, false, s.presence_penalty)) return e;
    if (auto e = read_number(o, "frequency_penalty", -2, 2, false, s.frequency_penalty)) return e;
    if (auto e = read_number(o, "repetition_penalty", 0, 2, true, s.repetition_penalty)) return e;
    std::optional<std::int64_t> top_k;
    if (auto e = read_integer(o, "top_k", -1, 1 << 20, top_k)) return e;
    if (top_k) s.top_k = static_cast<std::int32_t>(*top_k < 0 ? 0 : *top_k);  // -1 = off (vLLM)
    std::optional<std::int64_t> seed;
    if (auto e = read_integer(o, "seed", INT64_MIN, INT64_MAX, seed)) return e;
    if (seed) s.seed = static_cast<std::uint64_t>(*seed);
    if (auto e = read_logit_bias(o, limits, r)) return e;
    return read_logprobs(r.kind, o, r);
}

maybe_error read_control(const json::object& o, api_request& r) {
    if (const auto* v = field(o, "model")) {
        if (!v->is_string()) return field_error("model", "expected a string");
        r.model = std::string(v->get_string());
    }
    std::optional<std::int64_t> n;
    if (auto e = read_integer(o, "n", 1, k_max_choices, n)) return e;
    if (n) r.n = *n;
    std::optional<std::int64_t> mt, mct;
    // 0 scores the prompt and generates nothing (checked with echo / prompt_logprobs in api_compat).
    if (auto e = read_integer(o, "max_tokens", 0, INT32_MAX, mt)) return e;
    if (auto e = read_integer(o, "max_completion_tokens", 0, INT32_MAX, mct)) return e;
    r.max_tokens = mct ? mct : mt;
    r.score_only = r.max_tokens == 0;
    if (auto e = read_bool(o, "stream", r.stream)) return e;
    if (const auto* so = field(o, "stream_options")) {
        if (!so->is_object()) return field_error("stream_options", "expected an object");
        if (!r.stream) return field_error("stream_options", "only allowed when stream is true");
        const auto* iu = field(so->get_object(), "include_usage");
        if (iu && !iu->is_bool()) return field_error("stream_options.include_usage", "expected a boolean");
        r.include_usage = iu && iu->get_bool();
    }
    if (auto e = read_bool(o, "ignore_eos", r.gen.ignore_eos)) return e;
    if (const auto* salt = field(o, "cache_salt")) {
        if (!salt->is_string()) return field_error("cache_salt", "expected a string");
        // "" would look like a tenant's salt but share the unsalted cache: refused (null = no salt).
        if (salt->get_string().empty()) return field_error("cache_salt", "must not be empty (omit it or send null for no salt)");
        if (salt->get_string().size() > 1024) return field_error("cache_salt", "longer than 1024 bytes");
        r.gen.cache_salt = std::string(salt->get_string());
    }
    std::optional<std::int64_t> timeout_ms;
    if (auto e = read_integer(o, "timeout_ms", 1, 86'400'000, timeout_ms)) return e;
    if (timeout_ms) r.gen.timeout = std::chrono::milliseconds(*timeout_ms);
    return std::nullopt;
}
}  // namespace

std::variant<api_request, api_error> parse_request(api_kind kind, const json::object& body,
                                                   const parse_limits& limits) {
    api_request r;
    r.kind = kind;
    maybe_error e = read_control(body, r);
    if (!e) e = kind == api_kind::completion ? read_prompt(body, limits, r) : read_messages(body, r);
    if (!e) e = read_sampling(body, limits, r);
    if (!e) e = read_stop(body, r);
    if (!e) e = read_stop_ids(body, limits, r);
    if (!e) e = read_output_spec(body, r);
    if (!e) e = read_compat_fields(body, r);
    if (e) return *e;
    return r;
}

std::variant<api_request, api_error> parse_request_text(api_kind kind, std::string_view body,
                                                        const parse_limits& limits) {
    boost::system::error_code ec;
    json::value v = json::parse(body, ec);
    if (ec) return field_error("body", "invalid JSON (" + ec.message() + ")", status::parse_error);
    if (!v.is_object()) return field_error("body", "expected a JSON object", status::parse_error);
    return parse_request(kind, v.get_object(), limits);
}

namespace {
api_error no_room(const char* field, std::string what, std::int64_t ctx) {
    return field_error(field, what + " leave no room in the usable context of " + std::to_string(ctx),
                       status::context_overflow);
}
}  // namespace

std::optional<api_error> prepare_prompt(api_request& r, const actors::engine& engine,
                                        std::int64_t default_max_tokens, prompt_work* work) {
    const char* prompt_field = r.kind == api_kind::chat ? "messages" : "prompt";
    const auto ctx = engine.card().usable_context;
    if (auto* ids = std::get_if<std::vector<actors::token_id>>(&r.prompt)) {
        r.gen.prompt = *ids;
    } else {
        std::string text;
        if (auto* msgs = std::get_if<std::vector<actors::chat_message>>(&r.prompt)) {
            auto t = engine.apply_chat_template(*msgs, r.chat);
            if (!t) return api_error{t.error().code, "messages", "messages: " + t.error().what()};
            text = std::move(*t);
        } else {
            text = std::get<std::string>(r.prompt);
        }
        // Known before tokenizing: no text this long fits (engine.hpp, max_prompt_bytes).
        const auto max_bytes = engine.card().max_prompt_bytes;
        if (max_bytes > 0 && text.size() > max_bytes) {
            if (work) work->refused_by_bytes = true;
            return no_room(prompt_field, std::to_string(text.size()) + " prompt bytes (more than " +
                                             std::to_string(max_bytes) + ", so more than " + std::to_string(ctx - 1) +
                                             " tokens)", ctx);
        }
        if (work) work->bytes_tokenized = text.size();
        auto enc = ctx > 0 ? engine.encode_prompt(text, ctx - 1) : engine.encode(text);
        if (!enc && enc.error().code == status::context_overflow)
            return no_room(prompt_field, "more than " + std::to_string(ctx - 1) + " prompt tokens", ctx);
        if (!enc) return api_error{enc.error().code, "prompt", "prompt: " + enc.error().what()};
        r.gen.prompt = std::move(*enc);
    }
    if (r.gen.prompt.empty()) return field_error(prompt_field, "encodes to zero tokens");
    const auto n = static_cast<std::int64_t>(r.gen.prompt.size());
    // ctx 0: the engine does not know its context (it decides at its door).
    if (ctx > 0 && !actors::fits_context(n, 1, ctx)) return no_room(prompt_field, std::to_string(n) + " prompt tokens", ctx);
    if (r.score_only) {
        // The engine's prefill always yields a first token: it is generated and dropped
        // (net/generate_http.cpp), so the answer holds no completion.
        r.gen.max_tokens = 1;
    } else if (r.max_tokens) {
        if (ctx > 0 && !actors::fits_context(n, *r.max_tokens, ctx)) {
            return field_error("max_tokens",
                               std::to_string(n) + " prompt tokens + max_tokens " + std::to_string(*r.max_tokens) +
                                   " exceed the usable context of " + std::to_string(ctx),
                               status::context_overflow);
        }
        r.gen.max_tokens = *r.max_tokens;
    } else {
        r.gen.max_tokens = ctx > 0 ? std::min(default_max_tokens, ctx - n) : default_max_tokens;
    }
    return prepare_constraint(r, engine);
}

}  // namespace calserve::net
