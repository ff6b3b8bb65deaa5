// The package's vocabulary GGUF, written and read by model/weights' GGUF code.
#include "model/package/gguf.hpp"

#include <span>

#include "model/weights/gguf.hpp"

namespace calserve::model::package {

std::string write_vocab_gguf(std::string_view architecture, std::string_view name,
                             const std::vector<std::string>& tokens) {
    gguf::writer w;
    w.add_string("general.architecture", architecture);
    w.add_string("general.name", name);
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_u32("general.alignment", gguf::k_default_alignment);
    gguf::value list;
    list.type = gguf::value_type::array;
    list.elem = gguf::value_type::string;
    list.strings = tokens;
    w.add("tokenizer.ggml.tokens", std::move(list));
    return w.serialise();
}

result<std::uint64_t> vocab_gguf_token_count(std::string_view bytes, std::string_view label) {
    auto h = gguf::parse_header(std::as_bytes(std::span(bytes.data(), bytes.size())), bytes.size(), label);
    if (!h) return make_error(status::package_invalid, h.error().message);  // also an unsupported tensor type
    const gguf::value* t = h->find("tokenizer.ggml.tokens");
    if (!t || t->type != gguf::value_type::array) return std::uint64_t{0};
    return std::uint64_t{t->strings.size() + t->ints.size() + t->floats.size()};
}

}  // namespace calserve::model::package
