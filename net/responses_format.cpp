// Chat answers rendered as Responses API objects and stream events. See responses_api.hpp.
#include <boost/json.hpp>
#include <chrono>

#include "config/json_text.hpp"
#include "net/responses_api.hpp"

namespace calserve::net {
namespace json = boost::json;

namespace {
// Request settings a Response object repeats, with their defaults.
constexpr std::string_view k_echoed[] = {"instructions", "max_output_tokens", "temperature", "top_p", "tools",
                                         "tool_choice", "text", "reasoning", "metadata", "parallel_tool_calls",
                                         "user"};

json::object usage_of(const actors::usage& u) {
    return json::object{{"input_tokens", u.prompt_tokens},
                        {"input_tokens_details", json::object{{"cached_tokens", u.cached_tokens}}},
                        {"output_tokens", u.completion_tokens},
                        {"output_tokens_details", json::object{{"reasoning_tokens", 0}}},
                        {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

json::object text_part(std::string_view text) {
    return json::object{{"type", "output_text"}, {"text", text}, {"annotations", json::array{}}, {"logprobs", json::array{}}};
}

json::object reasoning_part(std::string_view text) { return json::object{{"type", "reasoning_text"}, {"text", text}}; }

// A reasoning item; while streamed its content starts empty (content_part.added fills it).
json::object reasoning_item(const std::string& id, std::string_view text) {
    json::array content;
    if (!text.empty()) content.push_back(reasoning_part(text));
    return json::object{{"type", "reasoning"}, {"id", id}, {"summary", json::array{}}, {"content", std::move(content)}};
}

json::object message_item(const std::string& id, std::string_view status, json::array content) {
    return json::object{{"type", "message"}, {"id", id},  {"status", status},
                        {"role", "assistant"}, {"content", std::move(content)}};
}

json::object call_item(const std::string& id, const json::object& call, std::string_view arguments,
                       std::string_view status) {
    const auto& fn = call.at("function").as_object();
    return json::object{{"type", "function_call"}, {"id", id},           {"call_id", call.at("id")},
                        {"name", fn.at("name")},   {"arguments", arguments}, {"status", status}};
}

std::string_view status_of(const actors::generation_result& r) {
    return r.reason == actors::finish_reason::length ? "incomplete" : "completed";
}
}  // namespace

responses_stream::responses_stream(std::string id, std::string model, const json::object& request)
    : id_(std::move(id)),
      model_(std::move(model)),
      created_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                   .count()) {
    for (auto name : k_echoed) echo_[name] = request.contains(name) ? request.at(name) : json::value(nullptr);
    if (echo_["tools"].is_null()) echo_["tools"] = json::array{};
    if (echo_["tool_choice"].is_null()) echo_["tool_choice"] = "auto";
    if (echo_["text"].is_null()) echo_["text"] = json::object{{"format", json::object{{"type", "text"}}}};
    if (echo_["parallel_tool_calls"].is_null()) echo_["parallel_tool_calls"] = true;
    if (echo_["metadata"].is_null()) echo_["metadata"] = json::object{};
}

json::object responses_stream::response_shell(std::string_view status) const {
    json::object o{{"id", id_},     {"object", "response"},        {"created_at", created_}, {"status", status},
                   {"error", nullptr}, {"incomplete_details", nullptr}, {"model", model_},  {"output", json::array{}},
                   {"previous_response_id", nullptr}, {"store", false}, {"usage", nullptr}};
    for (const auto& kv : echo_) o[kv.key()] = kv.value();
    return o;
}

std::string responses_stream::event(std::string_view type, json::object body) {
    body["type"] = type;
    body["sequence_number"] = sequence_++;
    std::string out = "event: ";
    out += type;
    out += "\ndata: ";
    out += json_text(body);
    out += "\n\n";
    return out;
}

std::string responses_stream::open() {
    std::string out = event("response.created", json::object{{"response", response_shell("in_progress")}});
    out += event("response.in_progress", json::object{{"response", response_shell("in_progress")}});
    return out;
}

namespace {
json::object part_of_kind(bool reasoning, std::string_view text) {
    return reasoning ? reasoning_part(text) : text_part(text);
}
}  // namespace

json::object responses_stream::part_of(item_kind kind, std::string_view text) {
    return part_of_kind(kind == item_kind::reasoning, text);
}

std::string responses_stream::open_item(item_kind kind, const json::object* tool_call) {
    std::string out = close_item();
    const auto index = static_cast<std::int64_t>(done_items_.size());
    const std::string n = std::to_string(index);
    open_kind_ = kind;
    open_text_.clear();
    if (kind == item_kind::reasoning) {
        open_item_ = reasoning_item("rs_" + id_ + "_" + n, "");
    } else if (kind == item_kind::message) {
        open_item_ = message_item("msg_" + id_ + "_" + n, "in_progress", {});
    } else {
        open_item_ = call_item("fc_" + id_ + "_" + n, *tool_call, "", "in_progress");
    }
    out += event("response.output_item.added", json::object{{"output_index", index}, {"item", open_item_}});
    if (kind != item_kind::function_call) {  // the one content part the deltas go to
        out += event("response.content_part.added", json::object{{"item_id", open_item_.at("id")},
                                                                 {"output_index", index},
                                                                 {"content_index", 0},
                                                                 {"part", part_of(kind, "")}});
    }
    return out;
}

std::string responses_stream::close_item() {
    if (open_kind_ == item_kind::none) return {};
    const auto index = static_cast<std::int64_t>(done_items_.size());
    const json::value item_id = open_item_.at("id");
    std::string out;
    if (open_kind_ == item_kind::message) {
        out += event("response.output_text.done", json::object{{"item_id", item_id}, {"output_index", index},
                                                               {"content_index", 0}, {"text", open_text_},
                                                               {"logprobs", json::array{}}});
        out += event("response.content_part.done", json::object{{"item_id", item_id}, {"output_index", index},
                                                                {"content_index", 0}, {"part", text_part(open_text_)}});
        open_item_ = message_item(std::string(item_id.as_string()), "completed", json::array{text_part(open_text_)});
    } else if (open_kind_ == item_kind::reasoning) {
        out += event("response.reasoning_text.done", json::object{{"item_id", item_id}, {"output_index", index},
                                                                  {"content_index", 0}, {"text", open_text_}});
        out += event("response.content_part.done",
                     json::object{{"item_id", item_id}, {"output_index", index}, {"content_index", 0},
                                  {"part", part_of(item_kind::reasoning, open_text_)}});
        open_item_ = reasoning_item(std::string(item_id.as_string()), open_text_);
    } else {
        out += event("response.function_call_arguments.done",
                     json::object{{"item_id", item_id}, {"output_index", index}, {"arguments", open_text_}});
        open_item_["arguments"] = open_text_;
        open_item_["status"] = "completed";
    }
    out += event("response.output_item.done", json::object{{"output_index", index}, {"item", open_item_}});
    done_items_.push_back(std::move(open_item_));
    open_item_ = json::object();
    open_kind_ = item_kind::none;
    return out;
}

std::string responses_stream::on_chunk(std::string_view chat_chunk) {
    const json::value v = json::parse(chat_chunk);
    const auto& choices = v.at("choices").as_array();
    if (choices.empty()) return {};
    const auto* delta = choices.at(0).as_object().if_contains("delta");
    if (!delta || !delta->is_object()) return {};
    const auto& d = delta->get_object();
    std::string out;
    const auto index = [&] { return static_cast<std::int64_t>(done_items_.size()); };
    if (const auto* r = d.if_contains("reasoning_content"); r && r->is_string() && !r->get_string().empty()) {
        if (open_kind_ != item_kind::reasoning) out += open_item(item_kind::reasoning, nullptr);
        open_text_ += r->get_string();
        out += event("response.reasoning_text.delta", json::object{{"item_id", open_item_.at("id")},
                                                                   {"output_index", index()},
                                                                   {"content_index", 0},
                                                                   {"delta", *r}});
    }
    if (const auto* c = d.if_contains("content"); c && c->is_string() && !c->get_string().empty()) {
        if (open_kind_ != item_kind::message) out += open_item(item_kind::message, nullptr);
        open_text_ += c->get_string();
        out += event("response.output_text.delta", json::object{{"item_id", open_item_.at("id")},
                                                                {"output_index", index()},
                                                                {"content_index", 0},
                                                                {"delta", *c},
                                                                {"logprobs", json::array{}}});
    }
    if (const auto* calls = d.if_contains("tool_calls"); calls && calls->is_array()) {
        for (const auto& call : calls->get_array()) {
            const auto& c = call.as_object();
            if (c.contains("id")) out += open_item(item_kind::function_call, &c);
            const auto& args = c.at("function").at("arguments").as_string();
            if (args.empty()) continue;
            open_text_ += args;
            out += event("response.function_call_arguments.delta",
                         json::object{{"item_id", open_item_.at("id")}, {"output_index", index()}, {"delta", args}});
        }
    }
    return out;
}

std::string responses_stream::close(const actors::generation_result& r, const std::optional<api_error>& error) {
    std::string out = close_item();
    if (error) {
        auto resp = response_shell("failed");
        resp["output"] = done_items_;
        resp["error"] = json::object{{"code", to_string(error->code)}, {"message", error->message}};
        return out + event("response.failed", json::object{{"response", std::move(resp)}});
    }
    auto resp = response_shell(status_of(r));
    if (r.reason == actors::finish_reason::length) {
        resp["incomplete_details"] = json::object{{"reason", "max_output_tokens"}};
    }
    resp["output"] = done_items_;
    resp["usage"] = usage_of(r.tokens);
    const bool done = r.reason != actors::finish_reason::length;
    return out + event(done ? "response.completed" : "response.incomplete", json::object{{"response", std::move(resp)}});
}

json::object responses_stream::response_of(const json::object& chat, const actors::generation_result& r) {
    const auto& message = chat.at("choices").at(0).at("message").as_object();
    json::array output;
    const auto n = [&] { return std::to_string(output.size()); };
    if (const auto* rc = message.if_contains("reasoning_content"); rc && rc->is_string()) {
        output.push_back(reasoning_item("rs_" + id_ + "_" + n(), rc->get_string()));
    }
    if (const auto* c = message.if_contains("content"); c && c->is_string() && !c->get_string().empty()) {
        output.push_back(message_item("msg_" + id_ + "_" + n(), "completed", json::array{text_part(c->get_string())}));
    }
    if (const auto* calls = message.if_contains("tool_calls"); calls && calls->is_array()) {
        for (const auto& call : calls->get_array()) {
            const auto& args = call.at("function").at("arguments");
            output.push_back(call_item("fc_" + id_ + "_" + n(), call.as_object(),
                                       args.is_string() ? std::string_view(args.get_string()) : "", "completed"));
        }
    }
    auto resp = response_shell(status_of(r));
    if (r.reason == actors::finish_reason::length) {
        resp["incomplete_details"] = json::object{{"reason", "max_output_tokens"}};
    }
    resp["output"] = std::move(output);
    resp["usage"] = usage_of(r.tokens);
    return resp;
}

}  // namespace calserve::net
