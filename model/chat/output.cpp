// chat_output.hpp: the streaming split of a Qwen3 answer into reasoning, content
// and tool calls.
#include "model/chat/output.hpp"

#include <boost/json.hpp>

namespace calserve::model {
namespace {

constexpr std::string_view think_open = "<think>";
constexpr std::string_view think_close = "</think>";
constexpr std::string_view call_open = "<tool_call>";
constexpr std::string_view call_close = "</tool_call>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// Length of the longest suffix of `s` that is a proper prefix of `tag`: text that
// may still become the tag once more arrives.
std::size_t held_suffix(std::string_view s, std::string_view tag) {
    for (std::size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n) {
        if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
    }
    return 0;
}

enum class match : std::uint8_t { incomplete, mismatch, ok };

// A cursor over the block text for the call header `{"name": "<fn>", "arguments": `.
struct header_reader {
    std::string_view s;
    std::size_t i = 0;
    void skip_space() {
        while (i < s.size() && is_space(s[i])) ++i;
    }
    match literal(std::string_view lit) {
        skip_space();
        for (char c : lit) {
            if (i == s.size()) return match::incomplete;
            if (s[i++] != c) return match::mismatch;
        }
        return match::ok;
    }
    match name(std::string& out) {
        if (auto m = literal("\""); m != match::ok) return m;
        for (; i < s.size(); ++i) {
            if (s[i] == '\\') return match::mismatch;  // escapes: parsed whole at the end
            if (s[i] == '"') {
                ++i;
                return match::ok;
            }
            out += s[i];
        }
        return match::incomplete;
    }
};

// End of the arguments text: before trailing whitespace and the wrapper's "}".
std::size_t arguments_end(std::string_view block, std::size_t from) {
    std::size_t e = block.size();
    while (e > from && is_space(block[e - 1])) --e;
    if (e > from && block[e - 1] == '}') --e;
    while (e > from && is_space(block[e - 1])) --e;
    return e;
}

}  // namespace

chat_output_parser::chat_output_parser(chat_output_options options)
    : options_(std::move(options)), state_(options_.reasoning ? state::reasoning : state::content) {}

chat_delta chat_output_parser::push(std::string_view text) {
    buf_ += text;
    chat_delta out;
    for (;;) {
        const state before = state_;
        const std::size_t size = buf_.size();
        if (state_ == state::reasoning) step_reasoning(out, false);
        else if (state_ == state::content) step_content(out, false);
        else step_tool_call(out, false);
        if (state_ == before && buf_.size() == size) break;
        if (buf_.empty() && state_ == before) break;
    }
    return out;
}

chat_delta chat_output_parser::finish() {
    chat_delta out;
    for (int guard = 0; guard < 8; ++guard) {
        const state before = state_;
        if (state_ == state::reasoning) step_reasoning(out, true);
        else if (state_ == state::content) step_content(out, true);
        else step_tool_call(out, true);
        if (state_ == before) break;
    }
    if (state_ == state::content && calls_ == 0) out.content += pending_ws_;
    pending_ws_.clear();
    return out;
}

void chat_output_parser::step_reasoning(chat_delta& out, bool final) {
    if (at_start_) {
        if (buf_.starts_with(think_open)) {
            buf_.erase(0, think_open.size());
        } else if (!final && think_open.starts_with(buf_)) {
            return;  // maybe "<think>" still arriving
        }
    }
    auto close = buf_.find(think_close);
    std::size_t take = close != std::string::npos ? close : buf_.size() - (final ? 0 : held_suffix(buf_, think_close));
    for (std::size_t k = 0; k < take; ++k) {
        char c = buf_[k];
        if (c == '\n') {
            if (!at_start_) pending_nl_ += c;
            continue;
        }
        out.reasoning += pending_nl_;
        pending_nl_.clear();
        out.reasoning += c;
        at_start_ = false;
    }
    if (close == std::string::npos) {
        buf_.erase(0, take);
        if (final) at_start_ = false;
        return;
    }
    buf_.erase(0, close + think_close.size());
    pending_nl_.clear();
    state_ = state::content;
    at_start_ = true;  // the template drops the newlines after </think>
}

void chat_output_parser::emit_content(chat_delta& out, std::string_view text) {
    for (char c : text) {
        if (at_start_ && c == '\n' && options_.reasoning) continue;
        if (options_.tools && is_space(c)) {
            pending_ws_ += c;
            continue;
        }
        out.content += pending_ws_;
        pending_ws_.clear();
        out.content += c;
        at_start_ = false;
    }
}

void chat_output_parser::step_content(chat_delta& out, bool final) {
    if (!options_.tools) {
        emit_content(out, buf_);
        buf_.clear();
        return;
    }
    auto open = buf_.find(call_open);
    if (open == std::string::npos) {
        std::size_t take = buf_.size() - (final ? 0 : held_suffix(buf_, call_open));
        emit_content(out, std::string_view(buf_).substr(0, take));
        buf_.erase(0, take);
        return;
    }
    emit_content(out, std::string_view(buf_).substr(0, open));
    buf_.erase(0, open + call_open.size());
    ws_before_call_ = std::move(pending_ws_);  // layout, unless the block is no call
    pending_ws_.clear();
    state_ = state::tool_call;
    block_.clear();
    header_ = false;
    args_from_ = args_sent_ = 0;
}

void chat_output_parser::open_call(chat_delta& out, std::string name) {
    tool_call_delta d;
    d.index = calls_;
    d.id = options_.id_prefix + std::to_string(calls_);
    d.name = std::move(name);
    d.opens = true;
    out.tool_calls.push_back(std::move(d));
    ++calls_;
}

bool chat_output_parser::try_header(chat_delta& out) {
    header_reader r{block_};
    std::string name;
    for (auto m : {r.literal("{"), r.literal("\"name\""), r.literal(":"), r.name(name), r.literal(","),
                   r.literal("\"arguments\""), r.literal(":")}) {
        if (m != match::ok) return false;
    }
    r.skip_space();
    if (r.i == block_.size()) return false;  // wait for the first argument byte
    open_call(out, std::move(name));
    header_ = true;
    args_from_ = args_sent_ = r.i;
    return true;
}

// At the finish of a cut call the wrapper's "}" is dropped only when what is
// before it is complete JSON; otherwise the arguments are sent as cut.
std::size_t chat_output_parser::final_arguments_end(std::string_view block, std::size_t from) {
    std::size_t end = arguments_end(block, from);
    std::size_t full = block.size();
    while (full > from && is_space(block[full - 1])) --full;
    if (end == full) return full;
    boost::system::error_code ec;
    (void)boost::json::parse(block.substr(from, end - from), ec);
    return ec ? full : end;
}

void chat_output_parser::stream_arguments(chat_delta& out, bool final) {
    std::size_t end = final ? final_arguments_end(block_, args_from_) : arguments_end(block_, args_sent_);
    if (end <= args_sent_) return;
    tool_call_delta d;
    d.index = calls_ - 1;
    d.arguments = block_.substr(args_sent_, end - args_sent_);
    out.tool_calls.push_back(std::move(d));
    args_sent_ = end;
}

// A block without the streamed header shape: parse it whole.
void chat_output_parser::close_call(chat_delta& out) {
    if (header_) {
        std::size_t end = arguments_end(block_, args_from_);
        if (end > args_sent_) {
            tool_call_delta d;
            d.index = calls_ - 1;
            d.arguments = block_.substr(args_sent_, end - args_sent_);
            out.tool_calls.push_back(std::move(d));
        }
        return;
    }
    boost::system::error_code ec;
    boost::json::value v = boost::json::parse(block_, ec);
    const boost::json::value* name = nullptr;
    if (!ec && v.is_object()) name = v.get_object().if_contains("name");
    if (!name || !name->is_string()) {
        pending_ws_ = ws_before_call_;
        emit_content(out, std::string(call_open) + block_ + std::string(call_close));
        return;
    }
    open_call(out, std::string(name->get_string()));
    const boost::json::value* args = v.get_object().if_contains("arguments");
    tool_call_delta d;
    d.index = calls_ - 1;
    if (!args) d.arguments = "{}";
    else if (args->is_string()) d.arguments = std::string(args->get_string());
    else d.arguments = boost::json::serialize(*args);
    out.tool_calls.push_back(std::move(d));
}

void chat_output_parser::step_tool_call(chat_delta& out, bool final) {
    auto close = buf_.find(call_close);
    if (close != std::string::npos) {
        block_ += buf_.substr(0, close);
        buf_.erase(0, close + call_close.size());
        if (!header_) try_header(out);
        close_call(out);
        state_ = state::content;
        at_start_ = false;
        return;
    }
    // At the finish, a cut "</tool_call" is layout, not arguments: dropped.
    std::size_t take = buf_.size() - held_suffix(buf_, call_close);
    block_ += buf_.substr(0, take);
    buf_.erase(0, final ? buf_.size() : take);
    if (!header_) try_header(out);
    if (header_) {
        stream_arguments(out, final);
    } else if (final && !block_.empty()) {
        pending_ws_ = ws_before_call_;
        emit_content(out, std::string(call_open) + block_);  // never became a call
    }
}

}  // namespace calserve::model
