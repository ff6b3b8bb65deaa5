// Streaming stop strings: split across deltas, overlapping candidates, UTF-8, no stops.
#include <catch2/catch.hpp>

#include <random>

#include "model/chat/stop_matcher.hpp"

using calserve::model::stop_matcher;

namespace {

struct streamed {
    std::string text;  // everything released, flush included
    bool stopped = false;
    std::size_t stop_index = 0;
};

// Feeds `text` in pieces of the given sizes (cycled), checking the hold-back invariant.
streamed feed(const std::vector<std::string>& stops, const std::string& text, const std::vector<std::size_t>& sizes) {
    stop_matcher m(stops);
    streamed out;
    std::size_t pos = 0;
    for (std::size_t k = 0; pos < text.size(); ++k) {
        const std::size_t len = std::min(sizes[k % sizes.size()], text.size() - pos);
        const auto r = m.push(std::string_view(text).substr(pos, len));
        pos += len;
        out.text += r.released;
        if (r.stopped) {
            out.stopped = true;
            out.stop_index = r.stop_index;
            break;
        }
        REQUIRE(out.text.size() + m.held_bytes() == pos);  // released + held == pushed
    }
    out.text += m.flush();
    return out;
}

}  // namespace

TEST_CASE("a stop string split across many deltas is found and dropped", "[stop]") {
    const std::string text = "Hello world.\nUser: next question";
    for (const auto& sizes : std::vector<std::vector<std::size_t>>{{1}, {2}, {3, 1}, {5}, {100}}) {
        const auto r = feed({"\nUser:"}, text, sizes);
        CHECK(r.stopped);
        CHECK(r.text == "Hello world.");
    }
}

TEST_CASE("only the longest suffix that prefixes a stop string is held back", "[stop]") {
    stop_matcher m({"</answer>", "STOP"});
    auto r = m.push("abc</ans");
    CHECK(r.released == "abc");
    CHECK(m.held_bytes() == 5);
    r = m.push("w");  // "</answ" still prefixes "</answer>"
    CHECK(r.released.empty());
    CHECK(m.held_bytes() == 6);
    r = m.push("z");  // "</answz" does not
    CHECK(r.released == "</answz");
    CHECK(m.held_bytes() == 0);
    r = m.push("xST");
    CHECK(r.released == "x");
    CHECK(m.held_bytes() == 2);
    r = m.push("OP tail");
    CHECK(r.stopped);
    CHECK(r.stop_index == 1);
    CHECK(r.released.empty());
    CHECK(m.push("more").released.empty());
    CHECK(m.flush().empty());
}

TEST_CASE("overlapping candidates: the stop that ends first wins, then the longer", "[stop]") {
    CHECK(feed({"abcd", "bc"}, "xxabcdyy", {1}).text == "xxa");
    CHECK(feed({"abcd", "bc"}, "xxabcdyy", {8}).text == "xxa");
    CHECK(feed({"bcd", "abcd"}, "xabcd", {2}).stop_index == 1);  // same end: the earlier start
    CHECK(feed({"aab"}, "aaab", {1}).text == "a");  // a partial match restarting inside itself
    CHECK(feed({"abab"}, "ababab", {1}).text == "");
    CHECK(feed({"ab", "xyz"}, "xyaxyz", {1, 2}).text == "xya");
}

TEST_CASE("multi-byte UTF-8 text and stop strings cut on character boundaries", "[stop]") {
    const std::string text = "价格是 12 元。结束了吗？结束";
    auto r = feed({"结束"}, text, {1});
    CHECK(r.stopped);
    CHECK(r.text == "价格是 12 元。");
    r = feed({"😀👍"}, "ok 😀 then 😀👍 end", {3, 1, 2});
    CHECK(r.text == "ok 😀 then ");
    // A stop whose first character shares its lead byte with other text: no false cut.
    r = feed({"é!"}, "café au lait", {1});
    CHECK_FALSE(r.stopped);
    CHECK(r.text == "café au lait");
}

TEST_CASE("no stop strings: everything is released at once", "[stop]") {
    stop_matcher m;
    CHECK(m.push("anything ").released == "anything ");
    CHECK(m.held_bytes() == 0);
    stop_matcher empty_only({""});
    CHECK(empty_only.push("x").released == "x");
    // Random text without the stop: released + flushed reproduces it, whatever the chunking.
    std::mt19937 gen(5);
    std::string text;
    for (int i = 0; i < 2000; ++i) text += static_cast<char>('a' + gen() % 3);
    const auto r = feed({"abcabcabcz"}, text, {1, 7, 3, 13});
    CHECK_FALSE(r.stopped);
    CHECK(r.text == text);
}
