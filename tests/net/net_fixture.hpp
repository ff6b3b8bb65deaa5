#pragma once
// Test fixtures for net/: a fake engine that implements actors::engine and emits
// tokens from its own threads (like the runtime does), a server on a loopback
// port run by two io threads, and small synchronous Beast clients.
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "actors/engine.hpp"
#include "metrics/metrics.hpp"
#include "net/http_server.hpp"

namespace calserve::test {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;

// Waits (bounded) for a condition that another thread makes true; returns whether it did.
inline bool wait_until(const std::function<bool()>& pred, std::chrono::seconds bound = std::chrono::seconds(20)) {
    const auto end = std::chrono::steady_clock::now() + bound;
    while (!pred()) {
        if (std::chrono::steady_clock::now() > end) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return true;
}

// Byte tokenizer; generation emits 'a', 'b', 'c', ... (one token each, text repeated
// `text_bytes` times) until max_tokens, from one thread per request.
class fake_engine final : public actors::engine {
public:
    fake_engine() { card_ = actors::model_card{"fake-model", 8192, 300, "sim"}; }
    ~fake_engine() override { join(); }

    // Knobs (set before requests).
    std::optional<status> submit_failure;
    actors::finish_reason final_reason = actors::finish_reason::length;
    std::optional<error_info> final_failure;
    std::chrono::microseconds token_delay{0};
    std::size_t text_bytes = 1;
    std::vector<std::string> script;     // when set: token i's text is script[i % size]
    float token_logprob = -0.5f;         // every token's logprob
    std::atomic<bool> ready{true};
    std::atomic<bool> gate_open{true};   // tokens wait while false
    std::string hold_suffix;             // requests whose id ends with it emit nothing until cancelled

    void_result submit(actors::generation_request r, std::shared_ptr<actors::generation_sink> sink) override {
        if (submit_failure) return make_error(*submit_failure, "fake refusal");
        auto flag = std::make_shared<std::atomic<bool>>(false);
        std::lock_guard lock(mutex_);
        submitted_.push_back(r);
        flags_[r.id] = flag;
        ++in_flight_;
        threads_.emplace_back([this, r = std::move(r), sink, flag] { generate(r, *sink, *flag); });
        return {};
    }
    void cancel(const std::string& id) override {
        std::lock_guard lock(mutex_);
        cancels_.push_back(id);
        if (auto it = flags_.find(id); it != flags_.end()) it->second->store(true);
    }
    const actors::model_card& card() const override { return card_; }
    actors::engine_health health() const override {
        return actors::engine_health{ready.load(), true, "ready", in_flight_.load(), 0};
    }
    result<std::vector<actors::token_id>> encode(std::string_view text) const override {
        std::vector<actors::token_id> ids;
        for (unsigned char c : text) ids.push_back(c);
        return ids;
    }
    result<std::string> decode(const std::vector<actors::token_id>& ids) const override {
        std::string s;
        for (auto id : ids) s += static_cast<char>(id);
        return s;
    }
    result<std::string> apply_chat_template(const std::vector<actors::chat_message>& msgs,
                                            const actors::chat_options& options) const override {
        const bool gen = options.add_generation_prompt;
        std::string s;
        for (const auto& m : msgs) s += m.role + ": " + m.content + "\n";
        if (gen) s += "assistant: ";
        return s;
    }
    void drain() override { drained = true; }
    void resume() override { drained = false; }
    std::int64_t in_flight() const override { return in_flight_.load(); }

    std::vector<std::string> cancels() const {
        std::lock_guard lock(mutex_);
        return cancels_;
    }
    std::vector<actors::generation_request> submitted() const {
        std::lock_guard lock(mutex_);
        return submitted_;
    }
    void join() {
        std::vector<std::thread> ts;
        {
            std::lock_guard lock(mutex_);
            ts.swap(threads_);
        }
        for (auto& t : ts) t.join();
    }
    std::atomic<bool> drained{false};
    std::atomic<std::int64_t> finished{0};

private:
    void generate(const actors::generation_request& r, actors::generation_sink& sink, std::atomic<bool>& cancelled) {
        actors::generation_result res;
        res.tokens.prompt_tokens = static_cast<std::int64_t>(r.prompt.size());
        res.reason = final_reason;
        res.failure = final_failure;
        if (r.score_top_n >= 0) {  // prompt token i scores -0.25 i; alternatives: itself, then 'z'
            res.prompt_scores.resize(r.prompt.size());
            for (std::size_t i = 1; i < r.prompt.size(); ++i) {
                auto& s = res.prompt_scores[i];
                s.logprob = -0.25f * float(i);
                const actors::token_logprob alts[] = {{r.prompt[i], s.logprob}, {'z', -3.0f}};
                for (std::int32_t k = 0; k < r.score_top_n && k < 2; ++k) s.top.push_back(alts[k]);
            }
        }
        for (std::int64_t i = 0; i < r.max_tokens; ++i) {
            const bool held = !hold_suffix.empty() && r.id.ends_with(hold_suffix);
            while ((!gate_open.load() || held) && !cancelled.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
            if (cancelled.load()) {
                res.reason = actors::finish_reason::cancelled;
                res.failure.reset();
                break;
            }
            if (token_delay.count() > 0) std::this_thread::sleep_for(token_delay);
            actors::generated_token t;
            t.token = 'a' + static_cast<int>(i % 26);
            t.text.assign(text_bytes, static_cast<char>(t.token));
            if (!script.empty()) t.text = script[std::size_t(i) % script.size()];
            t.logprob = token_logprob;
            if (r.sampling.top_logprobs > 0) t.top = {{t.token, -0.5f}, {'z', -2.0f}};
            sink.on_token(t);
            ++res.tokens.completion_tokens;
        }
        sink.on_finish(res);
        --in_flight_;
        ++finished;
    }

    actors::model_card card_;
    mutable std::mutex mutex_;
    std::vector<std::string> cancels_;
    std::vector<actors::generation_request> submitted_;
    std::map<std::string, std::shared_ptr<std::atomic<bool>>> flags_;
    std::vector<std::thread> threads_;
    std::atomic<std::int64_t> in_flight_{0};
};

struct server_fixture {
    explicit server_fixture(net::server_options o = {}) : metrics(registry) {
        server = std::make_unique<net::http_server>(ioc, engine, metrics, std::move(o));
        auto p = server->start();
        if (!p) throw std::runtime_error(p.error().what());
        port = *p;
        for (int i = 0; i < 2; ++i) threads.emplace_back([this] { ioc.run(); });
    }
    ~server_fixture() {
        server->stop();
        engine.gate_open = true;
        wait_until([&] { return server->connections() == 0; });
        engine.join();
        guard.reset();
        ioc.stop();
        for (auto& t : threads) t.join();
    }

    asio::io_context ioc;
    asio::executor_work_guard<asio::io_context::executor_type> guard = asio::make_work_guard(ioc);
    fake_engine engine;
    metrics::registry registry;
    calserve::metrics::calserve_metrics metrics;
    std::unique_ptr<net::http_server> server;
    std::uint16_t port = 0;
    std::vector<std::thread> threads;
};

inline tcp::socket connect(asio::io_context& ioc, std::uint16_t port) {
    tcp::socket s(ioc);
    s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    return s;
}

using headers = std::vector<std::pair<std::string, std::string>>;

inline http::response<http::string_body> call(std::uint16_t port, http::verb verb, const std::string& target,
                                              const std::string& body = {}, const headers& extra = {}) {
    asio::io_context ioc;
    auto s = connect(ioc, port);
    http::request<http::string_body> req{verb, target, 11};
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::content_type, "application/json");
    for (const auto& [k, v] : extra) req.set(k, v);
    req.body() = body;
    req.prepare_payload();
    http::write(s, req);
    beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 * 1024 * 1024);
    http::read(s, buf, parser);
    return parser.release();
}

inline http::response<http::string_body> post(std::uint16_t port, const std::string& target, const std::string& body,
                                              const headers& extra = {}) {
    return call(port, http::verb::post, target, body, extra);
}

// Splits an SSE body into its `data:` payloads; fails (returns nullopt) on any line that
// is not `data: ...` followed by a blank line.
inline std::optional<std::vector<std::string>> sse_events(const std::string& body) {
    std::vector<std::string> out;
    std::size_t pos = 0;
    while (pos < body.size()) {
        auto end = body.find("\n\n", pos);
        if (end == std::string::npos) return std::nullopt;
        std::string ev = body.substr(pos, end - pos);
        if (ev.rfind("data: ", 0) != 0 || ev.find('\n') != std::string::npos) return std::nullopt;
        out.push_back(ev.substr(6));
        pos = end + 2;
    }
    return out;
}

}  // namespace calserve::test
