// libFuzzer target fuzz_api_request: a request body (JSON text) to generation
// parameters, as HTTP bodies and WebSocket `generate` messages are turned into
// them: parse_request_text (every field's type and range), then prepare_prompt
// against an engine whose tokenizer and chat template are the real Qwen3 ones.
// A body with a "messages" key is read as chat, any other as a completion.
// Properties: no crash, leak, UB or exception; an accepted request has a
// non-empty prompt of ids in the vocabulary that, with max_tokens, fits the
// usable context; a refused one names the field when it is a parameter error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "net/api_params.hpp"
#include "tests/fuzz/fuzz_check.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace calserve;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static fuzz::tokenizer_engine engine(fuzz::qwen3_tokenizer());
    constexpr std::int64_t k_default_max_tokens = 256;
    const std::string_view body(reinterpret_cast<const char*>(data), size);
    const auto kind = body.find("\"messages\"") != std::string_view::npos ? net::api_kind::chat
                                                                          : net::api_kind::completion;
    const auto& card = engine.card();
    auto parsed = net::parse_request_text(kind, body, net::parse_limits{card.vocab_size});
    if (auto* e = std::get_if<net::api_error>(&parsed)) {
        CALSERVE_FUZZ_CHECK(!e->message.empty(), "an error without a message");
        return 0;
    }
    auto& req = std::get<net::api_request>(parsed);
    if (auto err = net::prepare_prompt(req, engine, k_default_max_tokens)) {
        CALSERVE_FUZZ_CHECK(!err->param.empty(), "a prompt error that names no field");
        return 0;
    }
    const auto n = static_cast<std::int64_t>(req.gen.prompt.size());
    CALSERVE_FUZZ_CHECK(n > 0, "an admitted request with an empty prompt");
    CALSERVE_FUZZ_CHECK(req.gen.max_tokens >= 0, "negative max_tokens");
    CALSERVE_FUZZ_CHECK(n + req.gen.max_tokens <= card.usable_context, "prompt + max_tokens past the context");
    for (auto id : req.gen.prompt) CALSERVE_FUZZ_CHECK(id >= 0 && id < card.vocab_size, "prompt id outside the vocabulary");
    for (auto id : req.gen.stop_token_ids) CALSERVE_FUZZ_CHECK(id >= 0 && id < card.vocab_size, "stop id outside the vocabulary");
    return 0;
}
