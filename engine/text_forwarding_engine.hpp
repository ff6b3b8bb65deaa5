#pragma once
//! An engine whose text services (tokenizer, chat template, grammar compiler) are
//! those of one resident serving engine. The model router and the traced engine
//! front generations that share the model's tokenizer; both answer these calls from
//! whichever engine is resident, and `not_ready` ("no model is serving") when none is.
#include <memory>

#include "actors/engine.hpp"

namespace calserve::engine {

class text_forwarding_engine : public actors::engine {
public:
    result<std::vector<actors::token_id>> encode(std::string_view text) const final;
    result<std::vector<actors::token_id>> encode_prompt(std::string_view text, std::int64_t max_tokens) const final;
    result<std::string> decode(const std::vector<actors::token_id>& ids) const final;
    result<std::string> apply_chat_template(const std::vector<actors::chat_message>& messages,
                                            const actors::chat_options& options) const final;
    result<std::shared_ptr<const model::grammar::compiled>> compile_grammar(model::grammar::grammar_kind kind,
                                                                           std::string_view text) const final;

protected:
    // The engine whose tokenizer answers; null when none is resident.
    virtual std::shared_ptr<const actors::engine> text_engine() const = 0;
};

}  // namespace calserve::engine
