#include "model/tokenizer/regex.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace calserve::model::detail {
namespace {

pcre2_code* as_code(void* p) { return static_cast<pcre2_code*>(p); }

std::string pcre2_message(int code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(code, buf, sizeof buf);
    return std::string(reinterpret_cast<const char*>(buf));
}

struct match_data_deleter {
    void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};
using match_data_ptr = std::unique_ptr<pcre2_match_data, match_data_deleter>;

// One match data block per thread, reused across calls and patterns. Only the
// whole-match offsets are read; with one ovector pair PCRE2 returns 0 instead of
// the group count when a pattern has groups, and still fills the pair.
pcre2_match_data* thread_match_data() {
    thread_local match_data_ptr data(pcre2_match_data_create(1, nullptr));
    return data.get();
}

}  // namespace

result<std::unique_ptr<split_regex>> split_regex::compile(const std::string& pattern) {
    int err = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &offset, nullptr);
    if (!code) {
        return make_error(status::parse_error, "pre-tokenizer regex does not compile at offset " +
                                                   std::to_string(offset) + ": " + pcre2_message(err));
    }
    std::unique_ptr<split_regex> r(new split_regex());
    r->pattern_ = pattern;
    r->code_ = code;
    r->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    return r;
}

split_regex::~split_regex() { pcre2_code_free(as_code(code_)); }

void_result split_regex::split_impl(std::string_view text, const piece_fn& piece) const {
    pcre2_code* code = as_code(code_);
    pcre2_match_data* md = thread_match_data();
    if (!md) return make_error(status::internal, "out of memory for regex match data");
    auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    std::size_t pos = 0;
    std::size_t gap_start = 0;
    while (pos < text.size()) {
        int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr)
                      : pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
            rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
        }
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) return make_error(status::internal, "pre-tokenizer regex match failed: " + pcre2_message(rc));
        PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        std::size_t start = ov[0];
        std::size_t end = ov[1];
        if (end == start) {
            // An empty match splits nothing; step over one code point.
            ++pos;
            while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
            continue;
        }
        if (start > gap_start) piece(text.substr(gap_start, start - gap_start));
        piece(text.substr(start, end - start));
        pos = end;
        gap_start = end;
    }
    if (gap_start < text.size()) piece(text.substr(gap_start));
    return {};
}

}  // namespace calserve::model::detail
