// SSE parsing of calserve bench: events survive any split of the byte stream, and
// completion chunks are classified (tokens, usage, error, [DONE]).
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "loadgen/sse.hpp"

using namespace calserve::loadgen;

namespace {
const std::string stream_text =
    "data: {\"id\":\"cmpl-1\",\"choices\":[{\"text\":\"Hel\",\"finish_reason\":null}],\"usage\":null}\n\n"
    ": a comment\r\n"
    "data: {\"id\":\"cmpl-1\",\"choices\":[{\"text\":\"lo\",\"finish_reason\":\"length\"}]}\r\n\r\n"
    "event: x\ndata: {\"id\":\"cmpl-1\",\"choices\":[],\"usage\":{\"completion_tokens\":2}}\n\n"
    "data: [DONE]\n\n";

std::vector<std::string> parse_in_pieces(std::size_t piece) {
    sse_parser p;
    std::vector<std::string> events;
    for (std::size_t i = 0; i < stream_text.size(); i += piece)
        p.feed(std::string_view(stream_text).substr(i, piece), [&](std::string_view d) { events.emplace_back(d); });
    return events;
}
}  // namespace

TEST_CASE("bench SSE parser yields the same events for every split", "[bench]") {
    const auto whole = parse_in_pieces(stream_text.size());
    REQUIRE(whole.size() == 4);
    CHECK(whole.back() == "[DONE]");
    for (std::size_t piece : {1, 2, 3, 7, 64}) CHECK(parse_in_pieces(piece) == whole);
}

TEST_CASE("bench SSE joins multi-line data and ignores other fields", "[bench]") {
    sse_parser p;
    std::vector<std::string> events;
    p.feed("id: 4\ndata: a\ndata:b\n\n\n", [&](std::string_view d) { events.emplace_back(d); });
    REQUIRE(events.size() == 1);
    CHECK(events[0] == "a\nb");
}

TEST_CASE("bench stream chunks are classified", "[bench]") {
    const auto events = parse_in_pieces(5);
    const auto first = parse_stream_chunk(events[0]);
    CHECK(first.text_events == 1);
    CHECK(first.id == "cmpl-1");
    CHECK(first.usage_completion_tokens == -1);
    CHECK(parse_stream_chunk(events[1]).finish_reason == "length");
    const auto usage = parse_stream_chunk(events[2]);
    CHECK(usage.text_events == 0);
    CHECK(usage.usage_completion_tokens == 2);
    CHECK(parse_stream_chunk(events[3]).done);
    const auto err = parse_stream_chunk(R"({"error":{"message":"deadline passed","code":"deadline_exceeded"}})");
    CHECK(err.has_error);
    CHECK(err.error == "deadline passed");
    CHECK(parse_stream_chunk("{not json").malformed);
    const auto chat = parse_stream_chunk(R"({"choices":[{"delta":{"content":"x"}}]})");
    CHECK(chat.text_events == 1);
    CHECK(parse_stream_chunk(R"({"choices":[{"text":""}]})").text_events == 0);
}
