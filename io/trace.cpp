// Trace records <-> JSON lines (docs/trace.md).
#include "io/trace.hpp"

#include <boost/json.hpp>
#include <fstream>

#include "config/json_text.hpp"

namespace calserve::io {
namespace json = boost::json;
namespace {

template <class... Fs>
struct overloaded : Fs... {
    using Fs::operator()...;
};
template <class... Fs>
overloaded(Fs...) -> overloaded<Fs...>;

template <class T>
json::array to_array(const std::vector<T>& v) {
    json::array a;
    for (const auto& x : v) a.emplace_back(x);
    return a;
}

json::object to_json(const trace_header& h) {
    return {{"k", "header"},       {"version", h.version},     {"source", h.source},
            {"seed", h.seed},      {"model", h.model_dir},     {"package", h.package_dir},
            {"overrides", to_array(h.overrides)},              {"duration_ns", h.duration_ns},
            {"from_start", h.from_start}, {"engine_seq", h.engine_seq}, {"packages", to_array(h.packages)}};
}
json::object to_json(const trace_submit& s) {
    json::array bias;
    for (const auto& [tok, b] : s.logit_bias) bias.emplace_back(json::array{tok, b});
    json::object o{{"k", "submit"},
                   {"t", s.t_ns},
                   {"id", s.id},
                   {"prompt", to_array(s.prompt)},
                   {"max_tokens", s.max_tokens},
                   {"temperature", s.temperature},
                   {"top_p", s.top_p},
                   {"top_k", s.top_k},
                   {"ignore_eos", s.ignore_eos},
                   {"timeout_ms", s.timeout_ms},
                   {"min_p", s.min_p},
                   {"presence_penalty", s.presence_penalty},
                   {"frequency_penalty", s.frequency_penalty},
                   {"repetition_penalty", s.repetition_penalty},
                   {"logit_bias", bias},
                   {"logprobs", s.logprobs},
                   {"top_logprobs", s.top_logprobs},
                   {"stop", to_array(s.stop)},
                   {"stop_token_ids", to_array(s.stop_token_ids)}};
    if (s.seed) o["seed"] = *s.seed;
    if (!s.cache_salt.empty()) o["cache_salt"] = s.cache_salt;
    if (s.grammar_kind != 0 || !s.grammar.empty() || s.thinking) {
        o["grammar_kind"] = s.grammar_kind;
        o["grammar"] = s.grammar;
        o["thinking"] = s.thinking;
        o["max_reasoning_tokens"] = s.max_reasoning_tokens;
    }
    return o;
}
json::object to_json(const trace_cancel& c) { return {{"k", "cancel"}, {"t", c.t_ns}, {"id", c.id}}; }
json::object to_json(const trace_arm& a) {
    json::object o{{"k", "arm"},   {"t", a.t_ns},          {"point", a.point},
                   {"mode", a.mode}, {"count", a.count},   {"probability", a.probability},
                   {"seed", a.seed}, {"delay_ms", a.delay_ms}};
    if (a.chip) o["chip"] = *a.chip;
    if (a.submodel) o["submodel"] = *a.submodel;
    if (a.request) o["request"] = *a.request;
    if (a.sequence) o["sequence"] = *a.sequence;
    return o;
}
json::object to_json(const trace_clear& c) {
    json::object o{{"k", "clear"}, {"t", c.t_ns}};
    if (c.point) o["point"] = *c.point;
    if (c.id) o["id"] = *c.id;
    return o;
}
json::object to_json(const trace_control& c) { return {{"k", "control"}, {"t", c.t_ns}, {"command", c.command}}; }
json::object to_json(const trace_model& m) {
    return {{"k", "model"}, {"t", m.t_ns},         {"op", m.op},
            {"alias", m.alias}, {"dir", m.dir}, {"keep", m.keep}, {"replace", m.replace}};
}
json::object to_json(const trace_message& m) {
    return {{"k", "msg"}, {"seq", m.seq}, {"t", m.t_ns}, {"from_id", m.from_id}, {"to_id", m.to_id},
            {"from", m.from}, {"to", m.to}, {"type", m.type}};
}
json::object to_json(const trace_fire& f) {
    return {{"k", "fire"}, {"t", f.t_ns}, {"point", f.point}, {"arm_id", f.arm_id}};
}
json::object to_json(const trace_done& d) {
    return {{"k", "done"},       {"t", d.t_ns},     {"id", d.id},         {"reason", d.reason},
            {"output_tokens", d.output_tokens}, {"ttft_ns", d.ttft_ns}, {"e2e_ns", d.e2e_ns},
            {"apply_lag_ns", d.apply_lag_ns}};
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

// An optional field: absent means "not set" (a match filter, a seed), never a default.
template <class T>
std::optional<T> get_opt(const json::object& o, std::string_view key) {
    if (!o.contains(key)) return std::nullopt;
    return get<T>(o, key);
}

// The records read field by field, each from an object whose "k" names its kind.
trace_submit submit_of(const json::object& o) {
    trace_submit s;
    s.t_ns = get<std::int64_t>(o, "t");
    s.id = get<std::string>(o, "id");
    s.prompt = get<std::vector<std::int32_t>>(o, "prompt");
    s.max_tokens = get<std::int64_t>(o, "max_tokens");
    s.temperature = get<double>(o, "temperature");
    s.top_p = get<double>(o, "top_p");
    s.top_k = get<std::int32_t>(o, "top_k");
    s.seed = get_opt<std::uint64_t>(o, "seed");
    s.cache_salt = get_opt<std::string>(o, "cache_salt").value_or("");
    s.ignore_eos = get<bool>(o, "ignore_eos");
    s.timeout_ms = get<std::int64_t>(o, "timeout_ms");
    s.min_p = get<double>(o, "min_p");
    s.presence_penalty = get<double>(o, "presence_penalty");
    s.frequency_penalty = get<double>(o, "frequency_penalty");
    s.repetition_penalty = get<double>(o, "repetition_penalty");
    for (const auto& pair : get<json::array>(o, "logit_bias")) {
        const auto& a = pair.as_array();
        if (a.size() != 2) throw std::invalid_argument("logit_bias entries are [token, bias] pairs");
        s.logit_bias.emplace_back(json::value_to<std::int32_t>(a[0]), a[1].to_number<double>());
    }
    s.logprobs = get<bool>(o, "logprobs");
    s.top_logprobs = get<std::int32_t>(o, "top_logprobs");
    s.stop = get<std::vector<std::string>>(o, "stop");
    s.stop_token_ids = get<std::vector<std::int32_t>>(o, "stop_token_ids");
    if (o.contains("grammar")) {
        s.grammar_kind = get<std::int32_t>(o, "grammar_kind");
        s.grammar = get<std::string>(o, "grammar");
        s.thinking = get<bool>(o, "thinking");
        s.max_reasoning_tokens = get<std::int64_t>(o, "max_reasoning_tokens");
    }
    return s;
}

trace_arm arm_of(const json::object& o) {
    trace_arm a;
    a.t_ns = get<std::int64_t>(o, "t");
    a.point = get<std::string>(o, "point");
    a.mode = get<std::string>(o, "mode");
    a.count = get<std::int64_t>(o, "count");
    a.probability = get<double>(o, "probability");
    a.seed = get<std::uint64_t>(o, "seed");
    a.delay_ms = get<double>(o, "delay_ms");
    a.chip = get_opt<std::uint32_t>(o, "chip");
    a.submodel = get_opt<std::string>(o, "submodel");
    a.request = get_opt<std::uint64_t>(o, "request");
    a.sequence = get_opt<std::uint64_t>(o, "sequence");
    return a;
}

trace_header header_of(const json::object& o) {
    trace_header h;
    h.version = get<int>(o, "version");
    if (h.version != k_trace_version)
        throw std::invalid_argument("trace version " + std::to_string(h.version) + " (this build reads " +
                                    std::to_string(k_trace_version) + ")");
    h.source = get<std::string>(o, "source");
    h.seed = get<std::uint64_t>(o, "seed");
    h.model_dir = get<std::string>(o, "model");
    h.package_dir = get<std::string>(o, "package");
    h.overrides = get<std::vector<std::string>>(o, "overrides");
    h.duration_ns = get<std::int64_t>(o, "duration_ns");
    h.from_start = get<bool>(o, "from_start");
    h.engine_seq = get<std::uint64_t>(o, "engine_seq");
    // Optional: traces written before generations were recorded lack it.
    if (o.contains("packages")) h.packages = get<std::vector<std::string>>(o, "packages");
    return h;
}

trace_record from_json(const json::object& o) {
    auto kind = get<std::string>(o, "k");
    if (kind == "msg")
        return trace_message{get<std::uint64_t>(o, "seq"), get<std::int64_t>(o, "t"), get<std::uint64_t>(o, "from_id"),
                             get<std::uint64_t>(o, "to_id"), get<std::string>(o, "from"), get<std::string>(o, "to"),
                             get<std::string>(o, "type")};
    if (kind == "submit") return submit_of(o);
    if (kind == "fire")
        return trace_fire{get<std::int64_t>(o, "t"), get<std::string>(o, "point"), get<std::uint64_t>(o, "arm_id")};
    if (kind == "cancel") return trace_cancel{get<std::int64_t>(o, "t"), get<std::string>(o, "id")};
    if (kind == "arm") return arm_of(o);
    if (kind == "clear")
        return trace_clear{get<std::int64_t>(o, "t"), get_opt<std::string>(o, "point"), get_opt<std::uint64_t>(o, "id")};
    if (kind == "control") {
        trace_control c{get<std::int64_t>(o, "t"), get<std::string>(o, "command")};
        if (c.command != "drain" && c.command != "resume" && c.command != "reset")
            throw std::invalid_argument("unknown control command \"" + c.command + "\"");
        return c;
    }
    if (kind == "model") {
        trace_model m{get<std::int64_t>(o, "t"), get<std::string>(o, "op"),  get<std::string>(o, "alias"),
                      get<std::string>(o, "dir"), get<bool>(o, "keep"),      get<bool>(o, "replace")};
        if (m.op != "load" && m.op != "rollback" && m.op != "unload")
            throw std::invalid_argument("unknown model operation \"" + m.op + "\"");
        return m;
    }
    if (kind == "done")
        return trace_done{get<std::int64_t>(o, "t"),         get<std::string>(o, "id"),
                          get<std::string>(o, "reason"),     get<std::int64_t>(o, "output_tokens"),
                          get<std::int64_t>(o, "ttft_ns"),   get<std::int64_t>(o, "e2e_ns"),
                          get<std::int64_t>(o, "apply_lag_ns")};
    if (kind == "header") return header_of(o);
    if (kind == "end")
        return trace_end{get<std::int64_t>(o, "t"), get<std::uint64_t>(o, "messages"), get<std::uint64_t>(o, "dropped")};
    throw std::invalid_argument("unknown record kind \"" + kind + "\"");
}

}  // namespace

std::string encode(const trace_record& record) {
    return json_text(std::visit([](const auto& r) { return to_json(r); }, record));
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

std::string describe(const trace_fire& f) {
    std::string out = "fault ";
    out += f.point;
    out += " (arm #" + std::to_string(f.arm_id) + ") at t=" + std::to_string(f.t_ns) + "ns";
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
                              [&](trace_fire& f) { file.fires.push_back(std::move(f)); },
                              [&](trace_done& d) { file.done.push_back(std::move(d)); },
                              [&](trace_end& e) { file.end = e; },
                              [&](auto& input) { file.inputs.emplace_back(std::move(input)); }},
                   *rec);
    }
    if (!have_header) return make_error(status::invalid_argument, "trace: no header record in " + path);
    return file;
}

}  // namespace calserve::io
