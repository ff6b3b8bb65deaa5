#pragma once
// What the network-facing fuzz targets share: an engine whose tokenizer is real and whose generation is a synchronous
// stub, and a server `impl` (no listener, no socket) with the daemon's default
// limits, for the functions of net/request_path.hpp.
#include <boost/asio/io_context.hpp>
#include <memory>
#include <string_view>
#include <vector>

#include "actors/engine.hpp"
#include "metrics/metrics.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "tests/fuzz/fuzz_text_support.hpp"
#include "net/http_server.hpp"

namespace calserve::fuzz {

// encode/decode/chat template by the real tokenizer, with the runtime's prompt bounds
// (card max_prompt_bytes, encode_prompt's early context_overflow); submit answers at once on the
// caller's thread: one token (the prompt's first) and a finish with reason length,
// or a `queue_full` refusal for a prompt of more than k_stub_admit_tokens tokens.
class tokenizer_engine final : public actors::engine {
public:
    static constexpr std::int64_t k_usable_context = 1024;   // small, so context overflow is reachable
    static constexpr std::size_t k_stub_admit_tokens = 512;

    explicit tokenizer_engine(std::shared_ptr<const model::tokenizer> tok);
    void_result submit(actors::generation_request request, std::shared_ptr<actors::generation_sink> sink) override;
    void cancel(const std::string&) override {}
    const actors::model_card& card() const override { return card_; }
    actors::engine_health health() const override { return {true, true, "ready", 0, 0}; }
    result<std::vector<actors::token_id>> encode(std::string_view text) const override;
    result<std::vector<actors::token_id>> encode_prompt(std::string_view text, std::int64_t max_tokens) const override;
    result<std::string> decode(const std::vector<actors::token_id>& ids) const override;
    result<std::string> apply_chat_template(const std::vector<actors::chat_message>& messages,
                                            const actors::chat_options& options) const override;
    void drain() override {}
    void resume() override {}
    std::int64_t in_flight() const override { return 0; }

private:
    std::shared_ptr<const model::tokenizer> tok_;
    actors::model_card card_;
};

// A server's shared state as the route handlers see it: config defaults for every
// limit (server.max_body_bytes, ws_write_queue, runtime.default_max_tokens) and the
// API key k_api_key. One per process; its io_context runs only inside ws_replies
// (a generate waits for the tokenize pool).
inline constexpr std::string_view k_api_key = "fuzz-key";
struct fuzz_server {
    fuzz_server();
    boost::asio::io_context ioc;
    tokenizer_engine engine;
    metrics::registry registry;
    calserve::metrics::calserve_metrics metrics;
    std::shared_ptr<net::http_server::impl> srv;
};
fuzz_server& shared_server();

}  // namespace calserve::fuzz
