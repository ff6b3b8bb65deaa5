// libFuzzer target fuzz_http_request: bytes as they arrive on a connection, through
// the daemon's request path short of the socket. The session loop of
// net/http_session.cpp is mirrored: Beast's request parser with the server's limits
// (net/request_path.hpp) reads requests one after another from the bytes (served
// in small reads, so requests split across reads), the head first, then the body;
// what the parser refuses is answered as the session does (parse_refusal: 431 head
// too large, 413 body too large, 400 malformed) and ends the connection, as does a
// head refusal (400 HTTP/1.1 without Host); /v1/ws goes through the handshake and
// key checks (ws_refusal) and ends it; any other request goes through route
// dispatch: small routes answer (HEAD with the GET route's header only),
// generation routes admit the body (JSON, parameters, chat template, tokenizer,
// context check) and submit to the stub engine, whose one token and finish are
// formatted as the response. Every response is serialized as it would be written.
// Properties: no crash, leak, undefined behaviour or exception for any input; a
// parser refusal is a 400, 413 or 431.
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <cstddef>
#include <cstdint>

#include "net/openai_format.hpp"
#include "net/request_path.hpp"
#include "tests/fuzz/fuzz_check.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace {
using namespace calserve;
using namespace calserve::net;
namespace beast = boost::beast;

constexpr std::size_t k_max_requests = 16;   // per input (a pipelining client)

// SyncReadStream over the input, in reads of at most `chunk` bytes, then EOF.
class memory_stream {
public:
    memory_stream(std::string_view in, std::size_t chunk) : in_(in), chunk_(chunk) {}
    template <class Buffers>
    std::size_t read_some(const Buffers& buffers, beast::error_code& ec) {
        if (in_.empty()) {
            ec = boost::asio::error::eof;
            return 0;
        }
        const std::size_t n = boost::asio::buffer_copy(buffers, boost::asio::buffer(in_.data(), std::min(chunk_, in_.size())));
        in_.remove_prefix(n);
        ec = {};
        return n;
    }
    template <class Buffers>
    std::size_t read_some(const Buffers& buffers) {
        beast::error_code ec;
        auto n = read_some(buffers, ec);
        if (ec) throw beast::system_error(ec);
        return n;
    }

private:
    std::string_view in_;
    std::size_t chunk_;
};

// SyncWriteStream that counts and drops what the server would write.
struct null_stream {
    std::size_t written = 0;
    template <class Buffers>
    std::size_t write_some(const Buffers& buffers, beast::error_code& ec) {
        ec = {};
        const auto n = boost::asio::buffer_size(buffers);
        written += n;
        return n;
    }
    template <class Buffers>
    std::size_t write_some(const Buffers& buffers) {
        beast::error_code ec;
        return write_some(buffers, ec);
    }
};

// Collects the stub engine's answer (it calls the sink before submit returns).
struct collect_sink final : actors::generation_sink {
    std::vector<actors::generated_token> tokens;
    std::optional<actors::generation_result> finish;
    void on_token(const actors::generated_token& t) override { tokens.push_back(t); }
    void on_finish(const actors::generation_result& r) override { finish = r; }
};

route_reply error_reply(const api_error& e) { return {http_status_of(e), error_json(e)}; }

// What handle_generate answers for an admitted request, minus the socket.
route_reply generate(http_server::impl& srv, api_kind kind, api_request& req) {
    req.gen.id = new_request_id(kind);
    auto* engine = &srv.engine;
    response_builder builder(kind, req.gen.id, req.model, req.include_usage, req.gen.sampling,
                             [engine](actors::token_id t) {
                                 auto s = engine->decode({t});
                                 return s ? std::move(*s) : std::string();
                             });
    auto sink = std::make_shared<collect_sink>();
    auto submitted = srv.engine.submit(req.gen, sink);
    if (!submitted) return error_reply(from_error_info(submitted.error()));
    if (!sink->finish) return error_reply(api_error{status::internal, {}, "stub engine did not finish"});
    if (req.stream) {
        std::string body;
        for (const auto& t : sink->tokens) body += builder.token_chunk(t);
        body += builder.finish_chunk(*sink->finish);
        if (req.include_usage) body += builder.usage_chunk(sink->finish->tokens);
        return {200, std::move(body), "text/event-stream"};
    }
    for (const auto& t : sink->tokens) builder.add_token(t);
    return {200, builder.final_response(*sink->finish)};
}

// A refusal that ends the connection, written as the session writes it.
void refuse(http_server::impl& srv, unsigned version, const api_error& e, const headers_list& extra, null_stream& out) {
    auto res = make_refusal(srv.options, version, e, extra);
    beast::error_code ec;
    http::write(out, res, ec);
}

// One parsed request -> its reply; false when the connection would end here.
bool answer(http_server::impl& srv, const http_request& req, null_stream& out) {
    std::string_view target = req.target();
    if (target.substr(0, target.find('?')) == "/v1/ws") {
        // Refused, or else the session hands the connection over to the WebSocket.
        if (auto bad = ws_refusal(srv, req)) refuse(srv, req.version(), bad->first, bad->second, out);
        return false;
    }
    routed r = route_request(srv, req);
    if (r.generate) {
        double tokenize_s = 0;
        auto admitted = admit_body(srv, *r.generate, req.body(), tokenize_s);
        if (auto* e = std::get_if<api_error>(&admitted)) r.reply = error_reply(*e);
        else r.reply = generate(srv, *r.generate, std::get<api_request>(admitted));
    }
    auto res = make_response(req, srv.options, r.reply.status, std::move(r.reply.body), r.reply.content_type);
    beast::error_code ec;
    if (req.method() == http::verb::head) {
        http::response_serializer<http::string_body> sr{res};
        http::write_header(out, sr, ec);
    } else {
        http::write(out, res, ec);
    }
    return !ec && res.keep_alive();
}

// Reads one request as the session does (head, head checks, body); answers a refusal
// itself. nullopt: the connection ends here.
std::optional<http_request> read_request(http_server::impl& srv, memory_stream& conn, beast::flat_buffer& buffer,
                                         null_stream& out) {
    http::request_parser<http::string_body> parser;
    limit_request_parser(parser, srv.options);
    beast::error_code ec;
    http::read_header(conn, buffer, parser, ec);
    if (!ec) {
        if (auto bad = head_refusal(parser.get())) {
            refuse(srv, parser.get().version(), *bad, {}, out);
            return std::nullopt;
        }
        if (!parser.is_done()) http::read(conn, buffer, parser, ec);
    }
    if (ec) {
        if (auto refusal = parse_refusal(ec, srv.options)) {
            const auto code = http_status_of(*refusal);
            CALSERVE_FUZZ_CHECK(code == 400 || code == 413 || code == 431, refusal->message.c_str());
            refuse(srv, parser.is_header_done() ? parser.get().version() : 11, *refusal, {}, out);
        }
        return std::nullopt;
    }
    return parser.release();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    auto& fs = calserve::fuzz::shared_server();
    auto& srv = *fs.srv;
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    memory_stream conn(in, 1 + size % 251);   // read sizes vary with the input, down to 1 byte
    null_stream out;
    beast::flat_buffer buffer;
    for (std::size_t i = 0; i < k_max_requests; ++i) {
        auto req = read_request(srv, conn, buffer, out);
        if (!req || !answer(srv, *req, out)) break;
    }
    return 0;
}
