// `calserve ctl`: the friendly client of the daemon's control socket
// (net/control_socket.hpp). Each invocation sends one command line and prints
// the answer, as text or (--json) as the raw response line.
//   calserve ctl --socket PATH fault arm wait_timeout --count 1
//   calserve ctl --socket PATH fault list | fault clear [POINT] [--arm-id N]
//   calserve ctl --socket PATH device reset | drain | resume | stats
//   calserve ctl --socket PATH trace start FILE | trace stop
//   calserve ctl --socket PATH model load NAME DIR [--replace] [--keep] [--no-wait]
//   calserve ctl --socket PATH model rollback NAME | model unload NAME | model list
#include <CLI/CLI.hpp>
#include <filesystem>
#include <boost/json.hpp>
#include <iomanip>
#include <iostream>
#include <memory>
#include <thread>

#include "config/json_text.hpp"
#include "config/config.hpp"
#include "net/control_socket.hpp"
#include "tools/command.hpp"

namespace calserve::tools::cmd_ctl {
namespace {
namespace json = boost::json;

struct ctl_options {
    std::string socket;
    std::string config_file;
    bool json_out = false;
    // fault arm
    std::string point;
    std::string mode;
    std::int64_t count = 0;
    double probability = -1;
    std::int64_t seed = -1;
    double delay_ms = -1;
    std::int64_t chip = -1;
    std::string submodel;
    std::int64_t request = -1;
    std::int64_t sequence = -1;
    std::int64_t arm_id = -1;
    std::string trace_path;
    // model
    std::string alias;
    std::string model_dir;
    bool replace = false;
    bool keep = false;
    bool no_wait = false;
    int wait_s = 600;
    json::object command;
};

struct subcommands {
    CLI::App* fault_arm;
    CLI::App* fault_list;
    CLI::App* fault_clear;
    CLI::App* device_reset;
    CLI::App* cache_clear;
    CLI::App* drain;
    CLI::App* resume;
    CLI::App* stats;
    CLI::App* trace_start;
    CLI::App* trace_stop;
    CLI::App* model_load;
    CLI::App* model_rollback;
    CLI::App* model_unload;
    CLI::App* model_list;
};

subcommands add_subcommands(CLI::App& app, ctl_options& o) {
    subcommands s{};
    auto* fault = app.add_subcommand("fault", "arm, list or clear injected faults");
    fault->require_subcommand(1);
    s.fault_arm = fault->add_subcommand("arm", "arm a fault point");
    s.fault_arm->add_option("point", o.point, "fault point (docs/faults.md)")->required();
    s.fault_arm->add_option("--mode", o.mode, "once | count | probability | always");
    s.fault_arm->add_option("--count", o.count, "fire this many times (mode count)");
    s.fault_arm->add_option("--probability", o.probability, "fire with this probability (mode probability)");
    s.fault_arm->add_option("--seed", o.seed, "seed of the probability generator");
    s.fault_arm->add_option("--delay-ms", o.delay_ms, "delay carried to the fault site");
    s.fault_arm->add_option("--chip", o.chip, "only on this chip");
    s.fault_arm->add_option("--submodel", o.submodel, "only for this submodel");
    s.fault_arm->add_option("--request", o.request, "only for this request number");
    s.fault_arm->add_option("--sequence", o.sequence, "only for device jobs holding this sequence");
    s.fault_list = fault->add_subcommand("list", "list armed faults with their fire counts");
    s.fault_clear = fault->add_subcommand("clear", "disarm all faults, one point, or one arm id");
    s.fault_clear->add_option("point", o.point, "only this fault point");
    s.fault_clear->add_option("--arm-id", o.arm_id, "only this arm id");
    auto* device = app.add_subcommand("device", "device actions");
    device->require_subcommand(1);
    s.device_reset = device->add_subcommand("reset", "reset the device (in-flight requests are re-prefilled)");
    auto* cache = app.add_subcommand("cache", "prefix cache actions");
    cache->require_subcommand(1);
    s.cache_clear = cache->add_subcommand("clear", "free every cached sequence's KV");
    s.drain = app.add_subcommand("drain", "stop admitting work; /ready turns false");
    s.resume = app.add_subcommand("resume", "admit work again after drain");
    s.stats = app.add_subcommand("stats", "print the daemon's counters and states");
    auto* trace = app.add_subcommand("trace", "record inputs and actor messages (recordable daemons)");
    trace->require_subcommand(1);
    s.trace_start = trace->add_subcommand("start", "start recording to a file");
    s.trace_start->add_option("file", o.trace_path, "trace file")->required();
    s.trace_stop = trace->add_subcommand("stop", "stop recording");
    auto* model = app.add_subcommand("model", "release generations and models (docs/generations.md)");
    model->require_subcommand(1);
    s.model_load = model->add_subcommand("load", "validate, plan, configure, warm up and golden-check a package, then switch NAME to it");
    s.model_load->add_option("name", o.alias, "alias (the model name clients send)")->required();
    s.model_load->add_option("dir", o.model_dir, "calbin package directory")->required();
    s.model_load->add_flag("--replace", o.replace, "when both do not fit, drain the serving generation first");
    s.model_load->add_flag("--keep", o.keep, "keep the old generation resident (instant rollback)");
    s.model_rollback = model->add_subcommand("rollback", "point NAME back at its previous generation");
    s.model_rollback->add_option("name", o.alias, "alias")->required();
    for (auto* c : {s.model_load, s.model_rollback}) {
        c->add_flag("--no-wait", o.no_wait, "return once started instead of waiting for serving or failed");
        c->add_option("--wait-s", o.wait_s, "longest wait for the outcome, seconds");
    }
    s.model_unload = model->add_subcommand("unload", "stop serving NAME (its generation drains)");
    s.model_unload->add_option("name", o.alias, "alias")->required();
    s.model_list = model->add_subcommand("list", "aliases, their generations and states");
    app.require_subcommand(1);
    return s;
}

json::object fault_arm_command(const ctl_options& o) {
    json::object c{{"cmd", "fault.arm"}, {"point", o.point}};
    if (!o.mode.empty()) c["mode"] = o.mode;
    if (o.count > 0) c["count"] = o.count;
    if (o.probability >= 0) c["probability"] = o.probability;
    if (o.seed >= 0) c["seed"] = o.seed;
    if (o.delay_ms >= 0) c["delay_ms"] = o.delay_ms;
    json::object match;
    if (o.chip >= 0) match["chip"] = o.chip;
    if (!o.submodel.empty()) match["submodel"] = o.submodel;
    if (o.request >= 0) match["request"] = o.request;
    if (o.sequence >= 0) match["sequence"] = o.sequence;
    if (!match.empty()) c["match"] = std::move(match);
    return c;
}

std::optional<json::object> build_command(const subcommands& s, const ctl_options& o) {
    if (s.fault_arm->parsed()) return fault_arm_command(o);
    if (s.fault_list->parsed()) return json::object{{"cmd", "fault.list"}};
    if (s.fault_clear->parsed()) {
        json::object c{{"cmd", "fault.clear"}};
        if (!o.point.empty()) c["point"] = o.point;
        if (o.arm_id >= 0) c["arm_id"] = o.arm_id;
        return c;
    }
    if (s.device_reset->parsed()) return json::object{{"cmd", "device.reset"}};
    if (s.cache_clear->parsed()) return json::object{{"cmd", "cache.clear"}};
    if (s.drain->parsed()) return json::object{{"cmd", "drain"}};
    if (s.resume->parsed()) return json::object{{"cmd", "resume"}};
    if (s.stats->parsed()) return json::object{{"cmd", "stats"}};
    if (s.trace_start->parsed())  // the daemon resolves paths against its own directory: send an absolute one
        return json::object{{"cmd", "trace.start"}, {"path", std::filesystem::absolute(o.trace_path).string()}};
    if (s.trace_stop->parsed()) return json::object{{"cmd", "trace.stop"}};
    if (s.model_load->parsed())
        return json::object{{"cmd", "model.load"}, {"alias", o.alias},
                            {"dir", std::filesystem::absolute(o.model_dir).string()},
                            {"replace", o.replace}, {"keep", o.keep}};
    if (s.model_rollback->parsed()) return json::object{{"cmd", "model.rollback"}, {"alias", o.alias}};
    if (s.model_unload->parsed()) return json::object{{"cmd", "model.unload"}, {"alias", o.alias}};
    if (s.model_list->parsed()) return json::object{{"cmd", "model.list"}};
    return std::nullopt;
}

std::string text_of(const json::value& v) { return v.is_string() ? std::string(v.as_string()) : json_text(v); }

void print_flat(const json::value& v, const std::string& prefix) {
    if (v.is_object()) {
        for (const auto& kv : v.as_object()) {
            print_flat(kv.value(), prefix.empty() ? std::string(kv.key()) : prefix + "." + std::string(kv.key()));
        }
        return;
    }
    std::cout << prefix << ": " << text_of(v) << "\n";
}

void print_fault_list(const json::array& faults) {
    if (faults.empty()) {
        std::cout << "no faults armed\n";
        return;
    }
    std::cout << std::left << std::setw(6) << "ID" << std::setw(18) << "POINT" << std::setw(13) << "MODE"
              << std::setw(11) << "REMAINING" << std::setw(8) << "FIRES" << "MATCH\n";
    for (const auto& f : faults) {
        const auto& o = f.as_object();
        std::cout << std::left << std::setw(6) << text_of(o.at("id")) << std::setw(18) << text_of(o.at("point"))
                  << std::setw(13) << text_of(o.at("mode")) << std::setw(11) << text_of(o.at("remaining"))
                  << std::setw(8) << text_of(o.at("fires")) << text_of(o.at("match")) << "\n";
    }
}

void print_generations(const json::object& r) {
    if (const auto* note = r.if_contains("state_note")) std::cout << "note: " << text_of(*note) << "\n";
    std::cout << std::left << std::setw(16) << "ALIAS" << std::setw(5) << "GEN" << std::setw(10) << "STATE"
              << std::setw(8) << "CHIPS" << std::setw(9) << "INFLIGHT" << "DIR / REASON\n";
    for (const auto& g : r.at("generations").as_array()) {
        const auto& o = g.as_object();
        std::string chips;
        for (const auto& c : o.at("chips").as_array()) chips += (chips.empty() ? "" : ",") + text_of(c);
        std::string state = text_of(o.at("state")) + (o.at("current").as_bool() ? "*" : "");
        std::cout << std::left << std::setw(16) << text_of(o.at("alias")) << std::setw(5) << text_of(o.at("generation"))
                  << std::setw(10) << state << std::setw(8) << (chips.empty() ? "-" : chips) << std::setw(9)
                  << text_of(o.at("in_flight")) << text_of(o.at("dir"));
        if (!o.at("reason").as_string().empty()) std::cout << "  (" << text_of(o.at("reason")) << ")";
        std::cout << "\n";
    }
}

void print_result(const std::string& cmd, const json::value& result) {
    const auto& r = result.as_object();
    if (cmd == "fault.arm") std::cout << "armed (arm id " << text_of(r.at("arm_id")) << ")\n";
    else if (cmd == "fault.list") print_fault_list(r.at("faults").as_array());
    else if (cmd == "fault.clear") std::cout << "cleared " << text_of(r.at("cleared")) << "\n";
    else if (cmd == "device.reset") std::cout << "device reset started\n";
    else if (cmd == "cache.clear") std::cout << "prefix cache emptied\n";
    else if (cmd == "drain") std::cout << "draining: no new work admitted\n";
    else if (cmd == "resume") std::cout << "resumed: admitting work\n";
    else if (cmd == "trace.start") std::cout << "tracing\n";
    else if (cmd == "trace.stop") std::cout << "trace stopped: " << text_of(r.at("written")) << "\n";
    else if (cmd == "model.list") print_generations(r);
    else if (cmd == "model.load" || cmd == "model.rollback")
        std::cout << text_of(r.at("alias")) << ": generation " << text_of(r.at("generation")) << " started\n";
    else if (cmd == "model.unload") std::cout << text_of(r.at("alias")) << ": unloaded (its generation drains)\n";
    else print_flat(result, "");
}

// Polls model.list until the generation serves (0) or fails (1), or the wait ends (1).
// `quiet` (--json): only the exit status tells the outcome.
int wait_for_generation(const std::string& socket, const std::string& alias, std::uint64_t generation, int wait_s,
                        bool quiet) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(wait_s);
    std::string last;
    while (std::chrono::steady_clock::now() < deadline) {
        auto reply = net::control_call(socket, R"({"cmd":"model.list"})");
        if (!reply) {
            std::cerr << "ctl: " << reply.error().message << "\n";
            return 1;
        }
        boost::system::error_code ec;
        auto v = json::parse(*reply, ec);
        if (!ec && v.is_object() && v.as_object().contains("result")) {
            for (const auto& g : v.at("result").at("generations").as_array()) {
                const auto& o = g.as_object();
                if (o.at("alias").as_string() != alias || o.at("generation").to_number<std::uint64_t>() != generation)
                    continue;
                const std::string state(o.at("state").as_string());
                if (state != last && !quiet) std::cout << alias << ": generation " << generation << " " << state << "\n";
                last = state;
                if (state == "serving" && o.at("current").as_bool()) {
                    if (quiet) return 0;
                    std::cout << alias << ": serving generation " << generation << " (switched " << std::fixed
                              << std::setprecision(0) << o.at("switch_ms").to_number<double>()
                              << " ms after the command)\n";
                    return 0;
                }
                if (state == "failed") {
                    std::cerr << "ctl: " << alias << " generation " << generation << " failed: " << text_of(o.at("reason"))
                              << "\n";
                    return 1;
                }
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::cerr << "ctl: " << alias << " generation " << generation << " did not finish within " << wait_s << " s\n";
    return 1;
}

int run_ctl(const subcommands& s, ctl_options& o) {
    std::string path = o.socket;
    if (path.empty()) {
        std::optional<std::filesystem::path> file;
        if (!o.config_file.empty()) file = o.config_file;
        auto cfg = config::load(file);
        if (!cfg) {
            std::cerr << "ctl: " << cfg.error().message << "\n";
            return 2;
        }
        path = cfg->string("server.control_socket");
    }
    if (path.empty()) {
        std::cerr << "ctl: no control socket: give --socket PATH (or server.control_socket in --config)\n";
        return 2;
    }
    auto command = build_command(s, o);
    if (!command) return 2;
    const std::string cmd(command->at("cmd").as_string());
    auto reply = net::control_call(path, json_text(*command));
    if (!reply) {
        std::cerr << "ctl: " << reply.error().message << "\n";
        return 1;
    }
    boost::system::error_code ec;
    auto v = json::parse(*reply, ec);
    if (ec || !v.is_object()) {
        std::cerr << "ctl: malformed reply: " << *reply << "\n";
        return 1;
    }
    const bool ok = v.as_object().contains("ok") && v.at("ok") == true;
    const bool waits = ok && (cmd == "model.load" || cmd == "model.rollback") && !o.no_wait;
    if (o.json_out) {
        std::cout << *reply << "\n";
        if (!waits) return ok ? 0 : 1;
        return wait_for_generation(path, std::string(v.at("result").at("alias").as_string()),
                                   v.at("result").at("generation").to_number<std::uint64_t>(), o.wait_s, true);
    }
    if (!ok) {
        const auto& e = v.at("error").as_object();
        std::cerr << "ctl: " << text_of(e.at("code")) << ": " << text_of(e.at("message")) << "\n";
        return 1;
    }
    print_result(cmd, v.at("result"));
    if (waits)
        return wait_for_generation(path, std::string(v.at("result").at("alias").as_string()),
                                   v.at("result").at("generation").to_number<std::uint64_t>(), o.wait_s, false);
    return 0;
}

const bool registered = register_command("ctl", "send a command to a running daemon's control socket", [](CLI::App& app) {
    auto o = std::make_shared<ctl_options>();
    app.add_option("--socket", o->socket, "control socket path (default: server.control_socket of --config)");
    app.add_option("--config", o->config_file, "config file to take server.control_socket from");
    app.add_flag("--json", o->json_out, "print the raw JSON response");
    auto subs = std::make_shared<subcommands>(add_subcommands(app, *o));
    return [o, subs] { return run_ctl(*subs, *o); };
});
}  // namespace
}  // namespace calserve::tools::cmd_ctl
