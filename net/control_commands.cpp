// Control-socket commands: parsing, validation and THE command table.
// See control_socket.hpp for the wire format.
#include <boost/json.hpp>
#include <cmath>

#include "config/json_text.hpp"
#include "net/control_socket.hpp"

namespace calserve::net {
namespace json = boost::json;

namespace {
struct command_error {
    status code = status::invalid_argument;
    std::string param;
    std::string message;
};
using command_result = std::variant<json::value, command_error>;
using command_fn = command_result (*)(control_target&, const json::object&);

command_error bad(std::string param, std::string what) {
    std::string msg = param.empty() ? what : param + ": " + what;
    return command_error{status::invalid_argument, std::move(param), std::move(msg)};
}

command_error from(const error_info& e) { return command_error{e.code, {}, e.what()}; }

const json::value* arg(const json::object& o, std::string_view name) {
    auto it = o.find(name);
    return it == o.end() || it->value().is_null() ? nullptr : &it->value();
}

std::optional<command_error> read_u64(const json::object& o, std::string_view name, std::optional<std::uint64_t>& out) {
    const auto* v = arg(o, name);
    if (!v) return std::nullopt;
    if (v->is_uint64()) out = v->get_uint64();
    else if (v->is_int64() && v->get_int64() >= 0) out = static_cast<std::uint64_t>(v->get_int64());
    else return bad(std::string(name), "expected a non-negative integer");
    return std::nullopt;
}

std::optional<command_error> read_double(const json::object& o, std::string_view name, double lo, double hi,
                                         double& out) {
    const auto* v = arg(o, name);
    if (!v) return std::nullopt;
    double d = v->is_double() ? v->get_double() : v->is_int64() ? static_cast<double>(v->get_int64()) : NAN;
    if (v->is_uint64()) d = static_cast<double>(v->get_uint64());
    if (std::isnan(d)) return bad(std::string(name), "expected a number");
    if (d < lo || d > hi) return bad(std::string(name), "out of range");
    out = d;
    return std::nullopt;
}

std::optional<command_error> read_match(const json::object& o, fault_arm_request& r) {
    const auto* m = arg(o, "match");
    if (!m) return std::nullopt;
    if (!m->is_object()) return bad("match", "expected an object {chip, submodel, request, sequence}");
    const auto& mo = m->get_object();
    std::optional<std::uint64_t> chip;
    if (auto e = read_u64(mo, "chip", chip)) return bad("match.chip", e->message);
    if (chip) {
        if (*chip > 64) return bad("match.chip", "out of range");
        r.chip = static_cast<std::uint32_t>(*chip);
    }
    if (const auto* s = arg(mo, "submodel")) {
        if (!s->is_string()) return bad("match.submodel", "expected a string");
        r.submodel = std::string(s->get_string());
    }
    if (auto e = read_u64(mo, "request", r.request)) return bad("match.request", e->message);
    if (auto e = read_u64(mo, "sequence", r.sequence)) return bad("match.sequence", e->message);
    return std::nullopt;
}

std::variant<fault_arm_request, command_error> parse_arm(const json::object& o) {
    fault_arm_request r;
    const auto* point = arg(o, "point");
    if (!point || !point->is_string() || point->get_string().empty()) return bad("point", "expected a fault point name");
    r.point = std::string(point->get_string());
    if (const auto* mode = arg(o, "mode")) {
        if (!mode->is_string()) return bad("mode", "expected once, count, probability or always");
        r.mode = std::string(mode->get_string());
    }
    if (r.mode != "once" && r.mode != "count" && r.mode != "probability" && r.mode != "always") {
        return bad("mode", "expected once, count, probability or always");
    }
    std::optional<std::uint64_t> count;
    if (auto e = read_u64(o, "count", count)) return *e;
    if (count) {
        if (*count < 1 || *count > 1'000'000'000) return bad("count", "must be in [1, 1e9]");
        r.count = static_cast<std::int64_t>(*count);
        if (!arg(o, "mode")) r.mode = "count";
    }
    if (auto e = read_double(o, "probability", 0, 1, r.probability)) return *e;
    if (r.mode == "probability" && !(r.probability > 0)) return bad("probability", "must be in (0, 1]");
    std::optional<std::uint64_t> seed;
    if (auto e = read_u64(o, "seed", seed)) return *e;
    r.seed = seed.value_or(0);
    if (auto e = read_double(o, "delay_ms", 0, 3'600'000, r.delay_ms)) return *e;
    if (auto e = read_match(o, r)) return *e;
    return r;
}

json::object entry_json(const fault_entry& e) {
    json::object match;
    if (e.spec.chip) match["chip"] = *e.spec.chip;
    if (e.spec.submodel) match["submodel"] = *e.spec.submodel;
    if (e.spec.request) match["request"] = *e.spec.request;
    if (e.spec.sequence) match["sequence"] = *e.spec.sequence;
    return json::object{{"id", e.id},
                        {"point", e.spec.point},
                        {"mode", e.spec.mode},
                        {"count", e.spec.count},
                        {"probability", e.spec.probability},
                        {"seed", e.spec.seed},
                        {"delay_ms", e.spec.delay_ms},
                        {"match", std::move(match)},
                        {"remaining", e.remaining},
                        {"fires", e.fires}};
}

command_result cmd_fault_arm(control_target& t, const json::object& o) {
    auto parsed = parse_arm(o);
    if (auto* e = std::get_if<command_error>(&parsed)) return *e;
    auto id = t.fault_arm(std::get<fault_arm_request>(parsed));
    if (!id) return from(id.error());
    return json::object{{"arm_id", *id}};
}

command_result cmd_fault_clear(control_target& t, const json::object& o) {
    fault_clear_request r;
    if (const auto* p = arg(o, "point")) {
        if (!p->is_string()) return bad("point", "expected a fault point name");
        r.point = std::string(p->get_string());
    }
    if (auto e = read_u64(o, "arm_id", r.id)) return *e;
    auto n = t.fault_clear(r);
    if (!n) return from(n.error());
    return json::object{{"cleared", *n}};
}

command_result cmd_fault_list(control_target& t, const json::object&) {
    json::array faults;
    for (const auto& e : t.fault_list()) faults.push_back(entry_json(e));
    return json::object{{"faults", std::move(faults)}};
}

template <void_result (control_target::*fn)()>
command_result cmd_void(control_target& t, const json::object&) {
    auto r = (t.*fn)();
    if (!r) return from(r.error());
    return json::object{};
}

command_result cmd_stats(control_target& t, const json::object&) {
    auto s = t.stats();
    if (!s) return from(s.error());
    boost::system::error_code ec;
    auto v = json::parse(*s, ec);
    if (ec || !v.is_object()) return command_error{status::internal, {}, "stats: target returned no JSON object"};
    return v;
}

command_result cmd_trace_start(control_target& t, const json::object& o) {
    const auto* p = arg(o, "path");
    if (!p || !p->is_string() || p->get_string().empty()) return bad("path", "expected a file path");
    auto r = t.trace_start(std::string(p->get_string()));
    if (!r) return from(r.error());
    return json::object{};
}

command_result cmd_trace_stop(control_target& t, const json::object&) {
    auto r = t.trace_stop();
    if (!r) return from(r.error());
    return json::object{{"written", *r}};
}

std::optional<command_error> read_string(const json::object& o, std::string_view name, std::string& out) {
    const auto* v = arg(o, name);
    if (!v || !v->is_string() || v->get_string().empty()) return bad(std::string(name), "expected a non-empty string");
    out = std::string(v->get_string());
    return std::nullopt;
}

bool read_flag(const json::object& o, std::string_view name) {
    const auto* v = arg(o, name);
    return v && v->is_bool() && v->get_bool();
}

command_result cmd_model_load(control_target& t, const json::object& o) {
    std::string alias, dir;
    if (auto e = read_string(o, "alias", alias)) return *e;
    if (auto e = read_string(o, "dir", dir)) return *e;
    auto r = t.model_load(alias, dir, read_flag(o, "replace"), read_flag(o, "keep"));
    if (!r) return from(r.error());
    return json::object{{"alias", alias}, {"generation", *r}};
}

command_result cmd_model_rollback(control_target& t, const json::object& o) {
    std::string alias;
    if (auto e = read_string(o, "alias", alias)) return *e;
    auto r = t.model_rollback(alias);
    if (!r) return from(r.error());
    return json::object{{"alias", alias}, {"generation", *r}};
}

command_result cmd_model_unload(control_target& t, const json::object& o) {
    std::string alias;
    if (auto e = read_string(o, "alias", alias)) return *e;
    if (auto r = t.model_unload(alias); !r) return from(r.error());
    return json::object{{"alias", alias}};
}

command_result cmd_model_list(control_target& t, const json::object&) {
    auto s = t.model_list();
    if (!s) return from(s.error());
    boost::system::error_code ec;
    auto v = json::parse(*s, ec);
    if (ec || !v.is_object()) return command_error{status::internal, {}, "model.list: target returned no JSON object"};
    return v;
}

struct command {
    std::string_view name;
    command_fn fn;
};

// Every control command.
constexpr command k_commands[] = {
    {"fault.arm", cmd_fault_arm},
    {"fault.clear", cmd_fault_clear},
    {"fault.list", cmd_fault_list},
    {"device.reset", cmd_void<&control_target::device_reset>},
    {"cache.clear", cmd_void<&control_target::cache_clear>},
    {"drain", cmd_void<&control_target::drain>},
    {"resume", cmd_void<&control_target::resume>},
    {"stats", cmd_stats},
    {"trace.start", cmd_trace_start},
    {"trace.stop", cmd_trace_stop},
    {"model.load", cmd_model_load},
    {"model.rollback", cmd_model_rollback},
    {"model.unload", cmd_model_unload},
    {"model.list", cmd_model_list},
};

std::string respond(const json::value& id, const command_result& r) {
    json::object out{{"id", id}};
    if (const auto* v = std::get_if<json::value>(&r)) {
        out["ok"] = true;
        out["result"] = *v;
    } else {
        const auto& e = std::get<command_error>(r);
        out["ok"] = false;
        json::object err{{"code", to_string(e.code)}, {"message", e.message}};
        err["param"] = e.param.empty() ? json::value(nullptr) : json::value(e.param);
        out["error"] = std::move(err);
    }
    return json_text(out);
}
}  // namespace

std::string handle_control_line(control_target& target, std::string_view line) {
    boost::system::error_code ec;
    auto v = json::parse(line, ec);
    if (ec || !v.is_object()) {
        return respond(nullptr, command_error{status::parse_error, "line", "expected one JSON object per line"});
    }
    const auto& o = v.get_object();
    json::value id = o.contains("id") ? o.at("id") : json::value(nullptr);
    // A number past the double range parses as infinity, which JSON cannot write back:
    // echoing it would make the reply line invalid JSON.
    if (id.is_double() && !std::isfinite(id.get_double())) {
        return respond(nullptr, bad("id", "expected a string, a finite number or null"));
    }
    const auto* cmd = arg(o, "cmd");
    if (!cmd || !cmd->is_string()) return respond(id, bad("cmd", "expected a command name"));
    for (const auto& c : k_commands) {
        if (c.name == cmd->get_string()) {
            try {
                return respond(id, c.fn(target, o));
            } catch (const std::exception& ex) {
                return respond(id, command_error{status::internal, {}, ex.what()});
            }
        }
    }
    std::string names;
    for (const auto& c : k_commands) names += (names.empty() ? "" : ", ") + std::string(c.name);
    return respond(id, command_error{status::not_found, "cmd", "cmd: unknown command (known: " + names + ")"});
}

}  // namespace calserve::net
