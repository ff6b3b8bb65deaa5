#pragma once
// An in-process HTTP server that answers with one server's documented shapes
// (tests/loadgen/protocol_fixtures.hpp): /v1/models, /props, /tokenize and a
// chunked SSE /v1/completions stream. It records what the client sent so tests
// can check the requests too. One thread per connection, loopback only.
#include <boost/json.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace calserve::test {

struct http_answer {
    int status = 200;
    std::string body;
};

// What a fake server says; each route is a function of the parsed request body.
struct fake_profile {
    std::string model_id;
    http_answer models;                                   // GET /v1/models
    http_answer props{404, R"({"detail":"Not Found"})"};  // GET /props
    std::function<http_answer(const boost::json::object& body)> tokenize;
    // POST /v1/completions (stream): an error answer, or the SSE events' data lines.
    std::function<std::optional<http_answer>(const boost::json::object& body)> refuse;
    std::function<std::vector<std::string>(std::int64_t prompt_tokens, std::int64_t max_tokens)> events;
};

class fake_server {
public:
    explicit fake_server(fake_profile profile);
    ~fake_server();
    fake_server(const fake_server&) = delete;
    fake_server& operator=(const fake_server&) = delete;

    std::uint16_t port() const;
    std::string url() const { return "http://127.0.0.1:" + std::to_string(port()); }
    // Bodies of the /v1/completions requests received, in arrival order.
    std::vector<boost::json::object> completions() const;
    int tokenize_calls() const;

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

}  // namespace calserve::test
