#include "tests/loadgen/fake_server.hpp"

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <thread>

namespace calserve::test {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;

struct fake_server::impl {
    fake_profile profile;
    asio::io_context ioc;
    tcp::acceptor acceptor{ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
    std::uint16_t port = 0;
    std::atomic<bool> stopping{false};
    std::thread accept_thread;
    mutable std::mutex mu;
    std::vector<std::thread> connections;
    std::vector<json::object> completions;
    int tokenize_calls = 0;

    void accept_loop() {
        while (!stopping) {
            boost::system::error_code ec;
            tcp::socket s(ioc);
            acceptor.accept(s, ec);
            if (ec || stopping) break;
            std::lock_guard lock(mu);
            connections.emplace_back([this, sock = std::move(s)]() mutable { serve(sock); });
        }
    }

    static void write_all(tcp::socket& s, const std::string& bytes) {
        boost::system::error_code ec;
        asio::write(s, asio::buffer(bytes), ec);
    }

    static void answer(tcp::socket& s, const http_answer& a) {
        write_all(s, "HTTP/1.1 " + std::to_string(a.status) + " X\r\nContent-Type: application/json\r\nContent-Length: " +
                         std::to_string(a.body.size()) + "\r\nConnection: close\r\n\r\n" + a.body);
    }

    // Chunked transfer encoding, one chunk per event, as the servers send them.
    static void stream(tcp::socket& s, const std::vector<std::string>& events) {
        write_all(s, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                     "Connection: close\r\n\r\n");
        for (const auto& e : events) {
            const std::string event = "data: " + e + "\n\n";
            char size[32];
            std::snprintf(size, sizeof size, "%zx\r\n", event.size());
            write_all(s, size + event + "\r\n");
        }
        write_all(s, "0\r\n\r\n");
    }

    static json::object body_of(const http::request<http::string_body>& req) {
        boost::system::error_code ec;
        auto v = json::parse(req.body(), ec);
        return (!ec && v.is_object()) ? v.get_object() : json::object{};
    }

    void completion(tcp::socket& s, const json::object& body) {
        {
            std::lock_guard lock(mu);
            completions.push_back(body);
        }
        if (profile.refuse)
            if (auto refused = profile.refuse(body)) return answer(s, *refused);
        const auto* prompt = body.if_contains("prompt");
        const auto* max = body.if_contains("max_tokens");
        if (prompt == nullptr || !prompt->is_array() || max == nullptr || !max->is_int64())
            return answer(s, {400, R"({"error":{"message":"prompt must be token ids"}})"});
        stream(s, profile.events(static_cast<std::int64_t>(prompt->get_array().size()), max->get_int64()));
    }

    void serve(tcp::socket& s) {
        beast::flat_buffer buf;
        http::request<http::string_body> req;
        boost::system::error_code ec;
        http::read(s, buf, req, ec);
        if (ec) return;
        const std::string target(req.target());
        if (req.method() == http::verb::get && target == "/v1/models") return answer(s, profile.models);
        if (req.method() == http::verb::get && target == "/props") return answer(s, profile.props);
        if (req.method() == http::verb::post && target == "/tokenize") {
            {
                std::lock_guard lock(mu);
                ++tokenize_calls;
            }
            return answer(s, profile.tokenize(body_of(req)));
        }
        if (req.method() == http::verb::post && target == "/v1/completions") return completion(s, body_of(req));
        answer(s, {404, R"({"detail":"Not Found"})"});
    }
};

fake_server::fake_server(fake_profile profile) : impl_(std::make_unique<impl>()) {
    impl_->profile = std::move(profile);
    impl_->port = impl_->acceptor.local_endpoint().port();
    impl_->accept_thread = std::thread([this] { impl_->accept_loop(); });
}

fake_server::~fake_server() {
    impl_->stopping = true;
    {  // wake the blocking accept with one last connection
        boost::system::error_code ec;
        tcp::socket poke(impl_->ioc);
        poke.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), impl_->port), ec);
    }
    impl_->accept_thread.join();
    std::vector<std::thread> connections;
    {
        std::lock_guard lock(impl_->mu);
        connections.swap(impl_->connections);
    }
    for (auto& t : connections) t.join();
}

std::uint16_t fake_server::port() const { return impl_->port; }

std::vector<json::object> fake_server::completions() const {
    std::lock_guard lock(impl_->mu);
    return impl_->completions;
}

int fake_server::tokenize_calls() const {
    std::lock_guard lock(impl_->mu);
    return impl_->tokenize_calls;
}

}  // namespace calserve::test
