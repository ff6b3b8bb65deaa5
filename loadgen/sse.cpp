#include "loadgen/sse.hpp"
#include "config/json_text.hpp"

#include <boost/json.hpp>

namespace calserve::loadgen {
namespace json = boost::json;

void sse_parser::feed(std::string_view bytes, const event_fn& on_event) {
    pending_.append(bytes);
    std::size_t start = 0;
    while (true) {
        const auto nl = pending_.find('\n', start);
        if (nl == std::string::npos) break;
        std::string_view l(pending_.data() + start, nl - start);
        if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
        line(l, on_event);
        start = nl + 1;
    }
    pending_.erase(0, start);
}

void sse_parser::line(std::string_view l, const event_fn& on_event) {
    if (l.empty()) {
        if (has_data_) on_event(data_);
        data_.clear();
        has_data_ = false;
        return;
    }
    if (l.front() == ':') return;
    const auto colon = l.find(':');
    const auto field = l.substr(0, colon);
    if (field != "data") return;
    std::string_view value = colon == std::string_view::npos ? std::string_view{} : l.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (has_data_) data_.push_back('\n');
    data_.append(value);
    has_data_ = true;
}

namespace {

void read_choices(const json::object& obj, stream_chunk& c) {
    const auto* choices = obj.if_contains("choices");
    if (choices == nullptr || !choices->is_array()) return;
    for (const auto& ch : choices->get_array()) {
        if (!ch.is_object()) continue;
        const auto& o = ch.get_object();
        const json::value* text = o.if_contains("text");
        if (text == nullptr) {  // chat chunks carry delta.content
            if (const auto* d = o.if_contains("delta"); d != nullptr && d->is_object())
                text = d->get_object().if_contains("content");
        }
        if (text != nullptr && text->is_string() && !text->get_string().empty()) ++c.text_events;
        if (const auto* f = o.if_contains("finish_reason"); f != nullptr && f->is_string())
            c.finish_reason = std::string(f->get_string());
    }
}

}  // namespace

stream_chunk parse_stream_chunk(std::string_view data) {
    stream_chunk c;
    if (data == "[DONE]") {
        c.done = true;
        return c;
    }
    boost::system::error_code ec;
    const auto v = json::parse(data, ec);
    if (ec || !v.is_object()) {
        c.malformed = true;
        return c;
    }
    const auto& obj = v.get_object();
    if (const auto* e = obj.if_contains("error"); e != nullptr) {
        c.has_error = true;
        const auto* m = e->is_object() ? e->get_object().if_contains("message") : nullptr;
        c.error = (m != nullptr && m->is_string()) ? std::string(m->get_string()) : json_text(*e);
        return c;
    }
    if (const auto* id = obj.if_contains("id"); id != nullptr && id->is_string()) c.id = std::string(id->get_string());
    read_choices(obj, c);
    if (const auto* u = obj.if_contains("usage"); u != nullptr && u->is_object()) {
        if (const auto* t = u->get_object().if_contains("completion_tokens"); t != nullptr && t->is_int64())
            c.usage_completion_tokens = t->get_int64();
        if (const auto* t = u->get_object().if_contains("prompt_tokens"); t != nullptr && t->is_int64())
            c.usage_prompt_tokens = t->get_int64();
        if (const auto* d = u->get_object().if_contains("prompt_tokens_details"); d != nullptr && d->is_object())
            if (const auto* t = d->get_object().if_contains("cached_tokens"); t != nullptr && t->is_int64())
                c.usage_cached_tokens = t->get_int64();
    }
    return c;
}

}  // namespace calserve::loadgen
