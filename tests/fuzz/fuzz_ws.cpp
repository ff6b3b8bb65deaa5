// libFuzzer target fuzz_ws_message: WebSocket client messages (one per input line,
// at most k_max_messages) through one session of /v1/ws as the reader hands them
// over (net::ws_replies: JSON, type and id, generate admission against the stub
// engine, cancel, per-socket limits), with every queued event rendered as the
// writer sends it. Properties: no crash, leak, UB or exception; every server
// message is a JSON object with a string `type`; every `started` stream ends with
// exactly one `done` or `error` for its id.
#include <boost/json.hpp>
#include <cstddef>
#include <cstdint>
#include <map>

#include "net/request_path.hpp"
#include "tests/fuzz/fuzz_check.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace calserve;
namespace json = boost::json;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    constexpr std::size_t k_max_messages = 32;
    auto& fs = fuzz::shared_server();
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    const auto replies = net::ws_replies(fs.srv, fuzz::split(in, '\n', k_max_messages));
    std::map<std::string, int> open;   // client id -> started and not yet ended
    for (const auto& text : replies) {
        boost::system::error_code ec;
        auto v = json::parse(text, ec);
        CALSERVE_FUZZ_CHECK(!ec && v.is_object(), text.c_str());
        const auto* type = v.get_object().if_contains("type");
        const auto* id = v.get_object().if_contains("id");
        CALSERVE_FUZZ_CHECK(type && type->is_string() && id && id->is_string(), text.c_str());
        const std::string sid(id->get_string());
        if (type->get_string() == "started") ++open[sid];
        if (type->get_string() == "done") {
            CALSERVE_FUZZ_CHECK(open[sid] == 1, "a done without its started");
            open.erase(sid);
        }
        if (type->get_string() == "error" && open.contains(sid)) open.erase(sid);
    }
    // The stub engine finishes every stream before submit returns.
    CALSERVE_FUZZ_CHECK(open.empty(), "a started stream that never ended");
    return 0;
}
