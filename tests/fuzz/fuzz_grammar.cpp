// libFuzzer targets for the grammar engine's readers; each executable is this file
// compiled with one CALSERVE_FUZZ_<target> defined.
//
// fuzz_grammar_ebnf: input = EBNF text, then a NUL, then bytes that steer a walk. The
//   grammar is compiled against a small vocabulary (every byte, a few multi-byte tokens,
//   EOS); if it compiles, each steering byte picks one allowed token by index.
//   Properties (model/grammar/grammar.hpp): a refusal is invalid_argument with "line:col: ";
//   the mask is never empty (EOS counts) before termination; accept() takes every
//   allowed token and refuses every disallowed one without changing the mask.
//
// fuzz_grammar_schema: input = a JSON Schema. Properties: a refusal is invalid_argument
//   whose message starts with the JSON pointer or "(root)"; a schema it converts
//   always compiles.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/grammar/grammar.hpp"
#include "tests/fuzz/fuzz_check.hpp"

namespace {
namespace gr = calserve::model::grammar;

std::shared_ptr<const gr::vocabulary> small_vocab() {
    static const auto v = [] {
        std::vector<std::string> t;
        for (int b = 0; b < 256; ++b) t.emplace_back(1, static_cast<char>(b));
        for (const char* s : {"\":", "\",\"", "true", "null", "{\"", "\xc3\xa9", "\xe4\xb8", "ab", "12", "\"}"}) t.emplace_back(s);
        t.emplace_back("<eos>");
        const std::int32_t eos = static_cast<std::int32_t>(t.size()) - 1;
        return gr::vocabulary::from_tokens(std::move(t), std::span(&eos, 1));
    }();
    return v;
}

bool allowed(const std::vector<std::uint32_t>& m, std::int32_t t) {
    return (m[static_cast<std::size_t>(t) / 32] >> (t % 32) & 1u) != 0;
}

#if defined(CALSERVE_FUZZ_grammar_ebnf)
void walk(const std::shared_ptr<const gr::compiled>& c, std::string_view steer) {
    gr::matcher m(c);
    std::vector<std::uint32_t> mask(m.mask_words());
    const auto n = static_cast<std::int32_t>(m.vocab_size());
    for (const char s : steer) {
        if (m.terminated()) return;
        m.fill_mask(mask);
        std::vector<std::int32_t> ok;
        for (std::int32_t t = 0; t < n; ++t) {
            if (allowed(mask, t)) ok.push_back(t);
        }
        CALSERVE_FUZZ_CHECK(!ok.empty() || m.overflowed(), "empty mask before termination");
        if (ok.empty()) return;
        const std::int32_t bad = static_cast<std::int32_t>(static_cast<unsigned char>(s)) % n;
        if (!allowed(mask, bad)) CALSERVE_FUZZ_CHECK(!m.accept(bad), "accepted a masked token");
        const std::int32_t pick = ok[static_cast<unsigned char>(s) % ok.size()];
        CALSERVE_FUZZ_CHECK(m.accept(pick), "refused an allowed token");
        if (pick == n - 1) return;  // EOS
    }
}
#endif

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
#if defined(CALSERVE_FUZZ_grammar_ebnf)
    const std::size_t nul = in.find('\0');
    const std::string_view text = in.substr(0, nul);
    auto c = gr::compile(text, small_vocab());
    if (!c) {
        CALSERVE_FUZZ_CHECK(c.code() == calserve::status::invalid_argument, "refusal is not invalid_argument");
        const auto& msg = c.error().message;
        CALSERVE_FUZZ_CHECK(!msg.empty() && msg[0] >= '1' && msg[0] <= '9' && msg.find(':') != std::string::npos,
                            "refusal without line:col");
        return 0;
    }
    walk(c.value(), nul == std::string_view::npos ? std::string_view{} : in.substr(nul + 1, 64));
#elif defined(CALSERVE_FUZZ_grammar_schema)
    auto e = gr::json_schema_to_ebnf(in);
    if (!e) {
        CALSERVE_FUZZ_CHECK(e.code() == calserve::status::invalid_argument, "refusal is not invalid_argument");
        const auto& msg = e.error().message;
        CALSERVE_FUZZ_CHECK(!msg.empty() && (msg[0] == '/' || msg.rfind("(root)", 0) == 0), "refusal without a path");
        return 0;
    }
    auto c = gr::compile(e.value(), small_vocab());
    CALSERVE_FUZZ_CHECK(c.ok(), c.ok() ? "" : c.error().message.c_str());
#endif
    return 0;
}
