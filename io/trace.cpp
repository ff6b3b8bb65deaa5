// Trace records <-> JSON lines (docs/trace.md).
#include "io/trace.hpp"

#include <boost/json.hpp>
#include <fstream>

namespace calserve::io {
namespace json = boost::json;
namespace {

template <class... Fs>
struct overloaded : Fs... {
    using Fs::operator()...;
};
template <class... Fs>
overloaded(Fs...) -> overloaded<Fs...>;

json::object to_json(const trace_header& h) {
    json::array ov;
    for (const auto& o : h.overrides) ov.emplace_back(o);
    return {{"k", "header"}, {"version", h.version}, {"seed", h.seed}, {"model", h.model_dir},
            {"overrides", ov}, {"duration_ns", h.duration_ns}};
}
json::object to_json(const trace_submit& s) {
    json::array prompt;
    for (auto t : s.prompt) prompt.emplace_back(t);
    json::object o{{"k", "submit"}, {"t", s.t_ns}, {"id", s.id}, {"prompt", prompt}, {"max_tokens", s.max_tokens},
                   {"temperature", s.temperature}, {"top_p", s.top_p}, {"top_k", s.top_k},
                   {"ignore_eos", s.ignore_eos}, {"timeout_ms", s.timeout_ms}};
    if (s.seed) o["seed"] = *s.seed;
    return o;
}
json::object to_json(const trace_cancel& c) { return {{"k", "cancel"}, {"t", c.t_ns}, {"id", c.id}}; }
json::object to_json(const trace_arm& a) {
    return {{"k", "arm"}, {"t", a.t_ns}, {"point", a.point}, {"mode", a.mode}, {"count", a.count},
            {"probability", a.probability}, {"seed", a.seed}, {"delay_ms", a.delay_ms}};
}
json::object to_json(const trace_clear& c) { return {{"k", "clear"}, {"t", c.t_ns}}; }
json::object to_json(const trace_message& m) {
    return {{"k", "msg"}, {"seq", m.seq}, {"t", m.t_ns}, {"from_id", m.from_id}, {"to_id", m.to_id},
            {"from", m.from}, {"to", m.to}, {"type", m.type}};
}
json::object to_json(const trace_end& e) {
    return {{"k", "end"}, {"t", e.t_ns}, {"messages", e.messages}, {"dropped", e.dropped}};
}

// Field readers: json::value_to throws on a type mismatch; parse_record turns that into an error.
template <class T>
T get(const json::object& o, std::string_view key) {
    auto* v = o.if_contains(key);
    if (!v) throw std::invalid_argument("missing field \"" + std::string(key) + "\"");
    if constexpr (std::is_same_v<T, double>)
        return v->is_double() ? v->get_double() : v->is_int64() ? double(v->get_int64()) : double(v->as_uint64());
    else
        return json::value_to<T>(*v);
}

trace_record from_json(const json::object& o) {
    auto kind = get<std::string>(o, "k");
    if (kind == "msg")
        return trace_message{get<std::uint64_t>(o, "seq"), get<std::int64_t>(o, "t"), get<std::uint64_t>(o, "from_id"),
                             get<std::uint64_t>(o, "to_id"), get<std::string>(o, "from"), get<std::string>(o, "to"),
                             get<std::string>(o, "type")};
    if (kind == "submit") {
        trace_submit s{get<std::int64_t>(o, "t"), get<std::string>(o, "id"), get<std::vector<std::int32_t>>(o, "prompt"),
                       get<std::int64_t>(o, "max_tokens"), get<double>(o, "temperature"), get<double>(o, "top_p"),
                       get<std::int32_t>(o, "top_k"), std::nullopt, get<bool>(o, "ignore_eos"),
                       get<std::int64_t>(o, "timeout_ms")};
        if (o.contains("seed")) s.seed = get<std::uint64_t>(o, "seed");
        return s;
    }
    if (kind == "cancel") return trace_cancel{get<std::int64_t>(o, "t"), get<std::string>(o, "id")};
    if (kind == "arm")
        return trace_arm{get<std::int64_t>(o, "t"), get<std::string>(o, "point"), get<std::string>(o, "mode"),
                         get<std::int64_t>(o, "count"), get<double>(o, "probability"), get<std::uint64_t>(o, "seed"),
                         get<double>(o, "delay_ms")};
    if (kind == "clear") return trace_clear{get<std::int64_t>(o, "t")};
    if (kind == "header")
        return trace_header{get<int>(o, "version"), get<std::uint64_t>(o, "seed"), get<std::string>(o, "model"),
                            get<std::vector<std::string>>(o, "overrides"), get<std::int64_t>(o, "duration_ns")};
    if (kind == "end")
        return trace_end{get<std::int64_t>(o, "t"), get<std::uint64_t>(o, "messages"), get<std::uint64_t>(o, "dropped")};
    throw std::invalid_argument("unknown record kind \"" + kind + "\"");
}

}  // namespace

std::string encode(const trace_record& record) {
    return json::serialize(std::visit([](const auto& r) { return to_json(r); }, record));
}

result<trace_record> parse_record(std::string_view line) {
    boost::system::error_code ec;
    auto v = json::parse(line, ec);
    if (ec || !v.is_object()) return make_error(status::invalid_argument, "trace: not a JSON object: " + std::string(line.substr(0, 80)));
    try {
        return from_json(v.as_object());
    } catch (const std::exception& e) {
        return make_error(status::invalid_argument, std::string("trace: ") + e.what());
    }
}

std::int64_t input_time(const trace_input& in) {
    return std::visit([](const auto& r) { return r.t_ns; }, in);
}

std::string describe(const trace_message& m) {
    // Appended piece by piece: GCC 12 misreports `literal + std::string` under -Wrestrict.
    std::string out;
    for (const std::string& piece : {std::string("#"), std::to_string(m.seq), std::string(" t="), std::to_string(m.t_ns),
                                     std::string("ns "), m.from, std::string("("), std::to_string(m.from_id),
                                     std::string(") -> "), m.to, std::string("("), std::to_string(m.to_id),
                                     std::string(") "), m.type})
        out += piece;
    return out;
}

result<trace_file> read_trace(const std::string& path) {
    std::ifstream in(path);
    if (!in) return make_error(status::not_found, "trace: cannot open " + path);
    trace_file file;
    bool have_header = false;
    std::string line;
    std::size_t line_no = 0;
    while (std::getline(in, line)) {
        ++line_no;
        if (line.empty()) continue;
        auto rec = parse_record(line);
        if (!rec) return make_error(status::invalid_argument, "line " + std::to_string(line_no) + ": " + rec.error().message);
        std::visit(overloaded{[&](trace_header& h) { file.header = std::move(h), have_header = true; },
                              [&](trace_message& m) { file.messages.push_back(std::move(m)); },
                              [&](trace_end& e) { file.end = e; },
                              [&](auto& input) { file.inputs.emplace_back(std::move(input)); }},
                   *rec);
    }
    if (!have_header) return make_error(status::invalid_argument, "trace: no header record in " + path);
    return file;
}

}  // namespace calserve::io
