// The origin and body-type policy as a table (net/origin_policy.hpp).
#include <catch2/catch.hpp>

#include "net/origin_policy.hpp"

using namespace calserve::net;

TEST_CASE("check_origin: no Origin, the own origin and its loopback forms, listed ones, the rest refused") {
    const auto p = make_origin_policy("127.0.0.1", 8080, " http://ui.example:3000/ , https://Tools.Example ");
    struct row {
        std::optional<std::string_view> origin;
        origin_verdict verdict;
    };
    const row table[] = {
        {std::nullopt, origin_verdict::absent},
        {"http://127.0.0.1:8080", origin_verdict::own},
        {"http://localhost:8080", origin_verdict::own},
        {"http://LOCALHOST:8080", origin_verdict::own},
        {"http://[::1]:8080", origin_verdict::own},
        {"https://localhost:8080", origin_verdict::own},
        {"http://localhost:3000", origin_verdict::refused},   // another local page is another origin
        {"http://localhost", origin_verdict::refused},        // port 80
        {"http://evil.example", origin_verdict::refused},
        {"http://127.0.0.1.evil.example:8080", origin_verdict::refused},
        {"null", origin_verdict::refused},                    // sandboxed frames, file:// pages
        {"file://", origin_verdict::refused},
        {"http://127.0.0.1:8080/path", origin_verdict::refused},
        {"http://ui.example:3000", origin_verdict::listed},
        {"https://tools.example", origin_verdict::listed},
        {"http://tools.example", origin_verdict::refused},    // the scheme is part of the origin
        {"", origin_verdict::refused},
    };
    for (const auto& r : table) {
        INFO(r.origin.value_or("(none)"));
        CHECK(check_origin(p, r.origin) == r.verdict);
    }
}

TEST_CASE("check_origin: server.host names the own origin unless it is a wildcard; * allows every origin") {
    CHECK(check_origin(make_origin_policy("box.lan", 9000, ""), "http://box.lan:9000") == origin_verdict::own);
    CHECK(check_origin(make_origin_policy("0.0.0.0", 9000, ""), "http://0.0.0.0:9000") == origin_verdict::refused);
    CHECK(check_origin(make_origin_policy("0.0.0.0", 9000, ""), "http://localhost:9000") == origin_verdict::own);
    CHECK(check_origin(make_origin_policy("::1", 9000, ""), "http://[::1]:9000") == origin_verdict::own);
    const auto any = make_origin_policy("127.0.0.1", 9000, "*");
    CHECK(any.any);
    CHECK(check_origin(any, "http://evil.example") == origin_verdict::listed);
    CHECK(check_origin(any, std::nullopt) == origin_verdict::absent);
}

TEST_CASE("body_type_accepted: JSON or undeclared; the form type only without an Origin; the rest 415") {
    CHECK(body_type_accepted(std::nullopt, false));
    CHECK(body_type_accepted(std::nullopt, true));
    CHECK(body_type_accepted("application/json", true));
    CHECK(body_type_accepted("Application/JSON; charset=utf-8", true));
    CHECK(body_type_accepted("application/x-www-form-urlencoded", false));   // curl -d without -H
    CHECK_FALSE(body_type_accepted("application/x-www-form-urlencoded", true));
    CHECK_FALSE(body_type_accepted("text/plain", false));
    CHECK_FALSE(body_type_accepted("text/plain;charset=UTF-8", true));
    CHECK_FALSE(body_type_accepted("multipart/form-data; boundary=x", false));
    CHECK_FALSE(body_type_accepted("", false));
}
