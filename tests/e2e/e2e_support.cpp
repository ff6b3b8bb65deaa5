#include "tests/e2e/e2e_support.hpp"

#include <catch2/catch.hpp>
#include <cstdio>
#include <sys/wait.h>

#include "tests/net/net_fixture.hpp"
#include "tests/support/model_support.hpp"
#include "tests/support/test_paths.hpp"

namespace calserve::test {

json::array to_json(const std::vector<std::int32_t>& ids) {
    json::array a;
    for (auto id : ids) a.push_back(id);
    return a;
}

std::string completion_body(const std::vector<std::int32_t>& prompt, int max_tokens, bool stream, std::int64_t timeout_ms) {
    json::object o{{"model", "m"}, {"prompt", to_json(prompt)}, {"max_tokens", max_tokens}, {"temperature", 0},
                   {"ignore_eos", true}, {"stream", stream}, {"logprobs", 1}};
    if (stream) o["stream_options"] = json::object{{"include_usage", true}};
    if (timeout_ms > 0) o["timeout_ms"] = timeout_ms;
    return json::serialize(o);
}

std::vector<std::string> serve_args(const std::string& preset, std::vector<std::string> extra) {
    std::vector<std::string> args{"--package", test_package_dir(preset).string(), "--served-model-name", "m",
                                  "--set", "log.level=warn"};
    for (auto& e : extra) {
        args.push_back("--set");
        args.push_back(e);
    }
    return args;
}

std::string sse_text(std::uint16_t port, const std::vector<std::int32_t>& prompt, int max_tokens,
                     const std::string& model) {
    json::object o{{"model", model}, {"prompt", to_json(prompt)}, {"max_tokens", max_tokens}, {"temperature", 0},
                   {"ignore_eos", true}, {"stream", true}};
    http::response<http::string_body> res;
    try {
        res = post(port, "/v1/completions", json::serialize(o));
    } catch (const std::exception& e) {
        return std::string("cut: ") + e.what();
    }
    if (res.result_int() != 200) return "HTTP " + std::to_string(res.result_int()) + ": " + res.body();
    auto events = sse_events(res.body());
    if (!events || events->empty() || events->back() != "[DONE]") return "malformed stream: " + res.body();
    std::string text;
    for (std::size_t i = 0; i + 1 < events->size(); ++i) {
        auto chunk = json::parse((*events)[i]).as_object();
        if (chunk.contains("error")) return "error: " + (*events)[i];
        auto& choices = chunk.at("choices").as_array();
        if (!choices.empty()) text += std::string(choices.at(0).at("text").as_string());
    }
    return text;
}

double metric(std::uint16_t port, const std::string& series) {
    auto res = call(port, http::verb::get, "/metrics");
    auto pos = res.body().find("\n" + series + " ");
    if (pos == std::string::npos) return -1;
    return std::stod(res.body().substr(pos + series.size() + 2));
}

std::string reference_text(std::uint16_t port, const std::vector<std::int32_t>& ids, const std::string& model) {
    std::vector<std::int32_t> known;  // the model's vocabulary (151936) is padded past the tokenizer's (151669)
    for (auto id : ids)
        if (id < 151669) known.push_back(id);
    json::object body{{"tokens", to_json(known)}};
    if (!model.empty()) body["model"] = model;
    auto res = post(port, "/detokenize", json::serialize(body));
    REQUIRE(res.result_int() == 200);
    return std::string(json::parse(res.body()).at("prompt").as_string());
}

std::filesystem::path socket_path(const std::string& name) {
    auto dir = scratch_dir(name) / "run";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all, std::filesystem::perm_options::replace);
    return dir / "ctl.sock";
}

std::pair<std::string, int> run_calserve(const std::string& args) {
    std::string cmd = calserve_binary().string() + " " + args + " 2>&1";
    std::FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) return {"", -1};
    std::string out;
    char buf[4096];
    while (auto n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    int rc = ::pclose(p);
    return {out, WIFEXITED(rc) ? WEXITSTATUS(rc) : -1};
}

std::pair<std::string, int> ctl(const std::filesystem::path& socket, const std::string& args) {
    return run_calserve("ctl --socket " + socket.string() + " --json " + args);
}

json::object ctl_result(const std::filesystem::path& socket, const std::string& args) {
    auto [out, rc] = ctl(socket, args);
    INFO(args << " -> " << out);
    REQUIRE(rc == 0);
    auto v = json::parse(out).as_object();
    REQUIRE(v.at("ok").as_bool());
    return v.at("result").as_object();
}

}  // namespace calserve::test
