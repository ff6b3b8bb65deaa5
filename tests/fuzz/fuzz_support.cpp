#include "tests/fuzz/fuzz_support.hpp"

#include "config/config.hpp"
#include "model/tokenizer/stream_decoder.hpp"
#include "net/server_impl.hpp"

namespace calserve::fuzz {

tokenizer_engine::tokenizer_engine(std::shared_ptr<const model::tokenizer> tok) : tok_(std::move(tok)) {
    card_ = actors::model_card{"fuzz-model", k_usable_context, tok_->vocab_size(), "sim"};
    card_.max_prompt_bytes = tok_->max_text_bytes(k_usable_context - 1).value_or(0);   // as serving_engine
}

void_result tokenizer_engine::submit(actors::generation_request request, std::shared_ptr<actors::generation_sink> sink) {
    if (request.prompt.empty()) return make_error(status::invalid_argument, "empty prompt");
    if (request.prompt.size() > k_stub_admit_tokens) return make_error(status::queue_full, "stub queue full");
    model::stream_decoder text(tok_);   // as the runtime does: released text is always valid UTF-8
    actors::generated_token t;
    t.token = request.prompt.front();
    t.text = text.push(t.token);
    t.logprob = -0.25f;
    if (request.sampling.top_logprobs > 0) t.top = {{t.token, -0.25f}, {0, -3.0f}};
    sink->on_token(t);
    actors::generation_result r;
    r.reason = actors::finish_reason::length;
    r.tail_text = text.flush();
    r.tokens = {static_cast<std::int64_t>(request.prompt.size()), 1};
    sink->on_finish(r);
    return {};
}

result<std::vector<actors::token_id>> tokenizer_engine::encode(std::string_view text) const {
    return tok_->encode(text);
}

result<std::vector<actors::token_id>> tokenizer_engine::encode_prompt(std::string_view text,
                                                                      std::int64_t max_tokens) const {
    return tok_->encode(text, max_tokens);
}

result<std::string> tokenizer_engine::decode(const std::vector<actors::token_id>& ids) const {
    return tok_->decode(ids);
}

result<std::string> tokenizer_engine::apply_chat_template(const std::vector<actors::chat_message>& messages,
                                                          const actors::chat_options& options) const {
    return tok_->apply_chat_template(messages, options);
}

fuzz_server::fuzz_server() : engine(qwen3_tokenizer()), metrics(registry) {
    auto o = net::server_options::from_config(config::defaults());
    o.api_key = std::string(k_api_key);
    srv = std::make_shared<net::http_server::impl>(ioc, engine, metrics, std::move(o));
}

fuzz_server& shared_server() {
    static fuzz_server s;
    return s;
}

}  // namespace calserve::fuzz
