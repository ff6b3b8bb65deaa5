#include "engine/text_forwarding_engine.hpp"

namespace calserve::engine {

namespace {
error_info none_serving() { return make_error(status::not_ready, "no model is serving"); }
}  // namespace

result<std::vector<actors::token_id>> text_forwarding_engine::encode(std::string_view text) const {
    auto e = text_engine();
    if (!e) return none_serving();
    return e->encode(text);
}

result<std::vector<actors::token_id>> text_forwarding_engine::encode_prompt(std::string_view text,
                                                                            std::int64_t max_tokens) const {
    auto e = text_engine();
    if (!e) return none_serving();
    return e->encode_prompt(text, max_tokens);
}

result<std::string> text_forwarding_engine::decode(const std::vector<actors::token_id>& ids) const {
    auto e = text_engine();
    if (!e) return none_serving();
    return e->decode(ids);
}

result<std::string> text_forwarding_engine::apply_chat_template(const std::vector<actors::chat_message>& messages,
                                                                const actors::chat_options& options) const {
    auto e = text_engine();
    if (!e) return none_serving();
    return e->apply_chat_template(messages, options);
}

result<std::shared_ptr<const model::grammar::compiled>> text_forwarding_engine::compile_grammar(
    model::grammar::grammar_kind kind, std::string_view text) const {
    auto e = text_engine();
    if (!e) return none_serving();
    return e->compile_grammar(kind, text);
}

}  // namespace calserve::engine
