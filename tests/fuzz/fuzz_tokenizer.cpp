// libFuzzer targets for the tokenizer's text paths on arbitrary bytes; each
// executable is this file compiled with one CALSERVE_FUZZ_<target> defined.
//
// fuzz_tokenizer: the Qwen3 tokenizer (tools/bootstrap's) on the input as text:
//   encode (UTF-8 check, special tokens, NFC, pre-tokenizer regex, BPE), then decode
//   of the ids it gave, and the same ids through the streaming detokenizer; then
//   the input read as ids (3 bytes each, modulo a range a little past the vocabulary,
//   so unknown ids occur) through decode and the streaming detokenizer.
//   Properties (model/tokenizer/tokenizer.hpp, model/tokenizer/stream_decoder.hpp): decode's text is
//   valid UTF-8; an unknown id is refused, never read; the stream's pieces are valid
//   UTF-8 and, with the flush, concatenate to decode() of the same ids.
//
// fuzz_stop_matcher: stop strings = the input's first line cut at '|' (at most
//   k_max_stops), deltas = its other lines; pushed in order, then flushed.
//   Properties (model/chat/stop_matcher.hpp): released + held == pushed until a stop;
//   held is the longest suffix that is a proper prefix of a stop string; released
//   text never holds a whole stop string; on a stop, the stop string follows the
//   released text in what was pushed.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "model/chat/stop_matcher.hpp"
#include "model/tokenizer/stream_decoder.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "tests/fuzz/fuzz_check.hpp"
#include "tests/fuzz/fuzz_text_support.hpp"

namespace {
using namespace calserve;
using model::token_id;

#if defined(CALSERVE_FUZZ_tokenizer)
// Decodes `ids` whole and streamed and checks that the two agree.
void check_decoders(const std::shared_ptr<const model::tokenizer>& tok, const std::vector<token_id>& ids) {
    auto whole = tok->decode(ids);
    model::stream_decoder stream(tok);
    std::string pieces;
    for (auto id : ids) {
        auto piece = stream.push(id);
        CALSERVE_FUZZ_CHECK(fuzz::valid_utf8(piece), "a stream piece that is not UTF-8");
        CALSERVE_FUZZ_CHECK(stream.pending_bytes() <= 3, "more than 3 bytes pending");
        pieces += piece;
    }
    auto tail = stream.flush();
    CALSERVE_FUZZ_CHECK(fuzz::valid_utf8(tail), "a flushed tail that is not UTF-8");
    pieces += tail;
    bool known = true;
    for (auto id : ids) known = known && id >= 0 && id < tok->vocab_size();
    CALSERVE_FUZZ_CHECK(whole.ok() == known, "decode refused known ids or took unknown ones");
    if (!whole) return;
    CALSERVE_FUZZ_CHECK(fuzz::valid_utf8(*whole), "decode gave text that is not UTF-8");
    CALSERVE_FUZZ_CHECK(pieces == *whole, "streamed text differs from decode()");
}

void run(std::string_view in) {
    static const auto tok = fuzz::qwen3_tokenizer();
    if (auto ids = tok->encode(in)) check_decoders(tok, *ids);
    std::vector<token_id> ids;
    const auto range = static_cast<std::uint32_t>(tok->vocab_size() + 64);
    for (std::size_t i = 0; i + 3 <= in.size(); i += 3) {
        const std::uint32_t v = static_cast<std::uint8_t>(in[i]) | static_cast<std::uint8_t>(in[i + 1]) << 8 |
                                static_cast<std::uint32_t>(static_cast<std::uint8_t>(in[i + 2])) << 16;
        ids.push_back(static_cast<token_id>(v % range));
    }
    check_decoders(tok, ids);
}
#elif defined(CALSERVE_FUZZ_stop_matcher)
constexpr std::size_t k_max_stops = 8;
constexpr std::size_t k_max_deltas = 64;

std::size_t longest_held(std::string_view text, const std::vector<std::string>& stops) {
    std::size_t best = 0;
    for (const auto& s : stops) {
        for (std::size_t len = std::min(text.size(), s.size() - (s.empty() ? 0 : 1)); len > best; --len) {
            if (text.substr(text.size() - len) == std::string_view(s).substr(0, len)) {
                best = len;
                break;
            }
        }
    }
    return best;
}

void run(std::string_view in) {
    auto lines = fuzz::split(in, '\n', k_max_deltas + 1);
    std::vector<std::string> stops;
    for (auto s : fuzz::split(lines[0], '|', k_max_stops)) stops.emplace_back(s);
    model::stop_matcher m(stops);
    std::string pushed, released;
    for (std::size_t i = 1; i < lines.size(); ++i) {
        pushed += lines[i];
        auto r = m.push(lines[i]);
        released += r.released;
        if (r.stopped) {
            CALSERVE_FUZZ_CHECK(r.stop_index < stops.size() && !stops[r.stop_index].empty(), "a stop index out of range");
            CALSERVE_FUZZ_CHECK(pushed.compare(released.size(), stops[r.stop_index].size(), stops[r.stop_index]) == 0,
                                "the stop string does not follow the released text");
            CALSERVE_FUZZ_CHECK(m.flush().empty() && m.push("x").released.empty(), "output after a stop");
            return;
        }
        CALSERVE_FUZZ_CHECK(released.size() + m.held_bytes() == pushed.size(), "released + held != pushed");
        CALSERVE_FUZZ_CHECK(pushed.compare(0, released.size(), released) == 0, "released text is not a prefix of pushed");
        CALSERVE_FUZZ_CHECK(m.held_bytes() == longest_held(pushed, stops), "held is not the longest stop prefix");
    }
    for (const auto& s : stops) {
        if (!s.empty()) CALSERVE_FUZZ_CHECK(released.find(s) == std::string::npos, "a whole stop string released");
    }
    released += m.flush();
    CALSERVE_FUZZ_CHECK(released == pushed, "released + flush != pushed");
}
#else
#error "define CALSERVE_FUZZ_<target>"
#endif
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    run(std::string_view(reinterpret_cast<const char*>(data), size));
    return 0;
}
