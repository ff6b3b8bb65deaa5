// Session affinity through the nginx front of deploy/nginx/ (the real nginx):
// requests carrying X-Session-Id go to one daemon per session by consistent
// hashing, so a conversation keeps hitting its daemon's prefix cache; adding a
// daemon moves only the sessions that now hash to it; requests without the header
// are still spread by load.
#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <memory>
#include <set>

#include "tests/e2e/daemon.hpp"
#include "tests/e2e/e2e_support.hpp"
#include "tests/e2e/nginx_front.hpp"
#include "tests/net/net_fixture.hpp"

using namespace calserve;
using namespace calserve::test;

namespace {
constexpr int k_sessions = 24;

// One short completion through the front; the daemon that answered, from the access log's last line.
std::string answer_of(nginx_front& front, const std::string& session) {
    headers extra;
    if (!session.empty()) extra.emplace_back("X-Session-Id", session);
    auto res = post(front.port(), "/v1/completions", completion_body({1, 2, 3}, 1, false), extra);
    REQUIRE(res.result_int() == 200);
    std::string upstream;
    REQUIRE(wait_until([&] {
        auto log = parse_access_log(front.access_log());
        for (auto it = log.rbegin(); it != log.rend(); ++it)
            if (it->request_id == std::string(res["X-Proxy-Request-Id"])) {
                upstream = it->upstream;
                return true;
            }
        return false;
    }));
    return upstream;
}

std::map<std::string, std::string> route_sessions(nginx_front& front) {
    std::map<std::string, std::string> where;
    for (int s = 0; s < k_sessions; ++s) {
        const auto id = "conversation-" + std::to_string(s);
        where[id] = answer_of(front, id);
    }
    return where;
}
}  // namespace

TEST_CASE("behind nginx: a session keeps its daemon, and a new daemon takes only its share", "[e2e][front]") {
    if (std::getenv("CALSERVE_SANITIZED")) {
        WARN("skipped under sanitizers: four sanitized daemons behind nginx take minutes on two cores");
        return;
    }
    REQUIRE_FALSE(nginx_binary().empty());  // tools/bootstrap installs it
    std::vector<std::unique_ptr<daemon_process>> daemons;
    for (int i = 0; i < 4; ++i) {
        daemons.push_back(std::make_unique<daemon_process>(serve_args("tiny-dense-1chip", {"device.sim.step_ms=0"})));
        REQUIRE(daemons.back()->started());
    }
    std::vector<std::uint16_t> three{daemons[0]->port(), daemons[1]->port(), daemons[2]->port()};
    std::map<std::string, std::string> before;
    {
        nginx_front front(three);
        REQUIRE(front.started());
        before = route_sessions(front);
        // Every later turn of a session goes where its first went.
        for (int turn = 0; turn < 2; ++turn)
            for (const auto& [session, daemon] : before) CHECK(answer_of(front, session) == daemon);
        std::set<std::string> used;
        for (const auto& [session, daemon] : before) used.insert(daemon);
        CHECK(used.size() == 3);  // 24 sessions spread over the three daemons
        // Without the header, load balancing reaches more than one daemon too.
        std::set<std::string> anonymous;
        for (int i = 0; i < 12; ++i) anonymous.insert(answer_of(front, ""));
        CHECK(anonymous.size() >= 2);
        CHECK(front.stop() == 0);
    }
    auto with_four = three;
    with_four.push_back(daemons[3]->port());
    nginx_front front(with_four);
    REQUIRE(front.started());
    auto after = route_sessions(front);
    const std::string fourth = "127.0.0.1:" + std::to_string(daemons[3]->port());
    int moved = 0;
    for (const auto& [session, daemon] : after) {
        INFO(session);
        if (daemon != before[session]) {
            ++moved;
            CHECK(daemon == fourth);  // a session moves only to the daemon that was added
        }
    }
    CHECK(moved > 0);
    CHECK(moved < k_sessions / 2);
    CHECK(front.stop() == 0);
    for (auto& d : daemons) REQUIRE(d->stop() == 0);
}
