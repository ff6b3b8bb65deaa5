#pragma once
// Headless Chromium driven over the DevTools protocol (a Beast WebSocket to the
// page target), for end-to-end tests of the web console. Started with
// --headless=new, --no-sandbox (tests may run as root), a scratch profile
// directory and --remote-debugging-port=0; the port is read from its stderr.
// Every wait is bounded; a browser that does not answer fails the call.
#include <boost/json.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace calserve::test {

// The chromium binary (CALSERVE_CHROMIUM, else chromium or chromium-browser on PATH), or "".
std::string chromium_binary();

class browser_page {
public:
    // Launches the browser and attaches to its first page; started() tells whether it worked.
    explicit browser_page(const std::string& binary);
    ~browser_page();
    browser_page(const browser_page&) = delete;
    browser_page& operator=(const browser_page&) = delete;

    bool started() const { return started_; }
    const std::string& failure() const { return failure_; }

    // One DevTools command; its `result` (throws std::runtime_error on an error reply or timeout).
    boost::json::object call(const std::string& method, boost::json::object params = {});
    // Runtime.evaluate of `expression` (promises awaited); its value.
    boost::json::value eval(const std::string& expression);
    // Evaluates `expression` every 100 ms until it is true (throwing counts as false); false after `bound`.
    bool wait_for(const std::string& expression, std::chrono::seconds bound);
    // Console errors, uncaught exceptions and error log entries seen so far.
    const std::vector<std::string>& errors() const { return errors_; }
    // A PNG of the page as it is now.
    std::string screenshot_png();

private:
    void on_event(const boost::json::object& msg);
    struct impl;
    std::unique_ptr<impl> impl_;
    bool started_ = false;
    std::string failure_;
    std::vector<std::string> errors_;
    std::int64_t next_id_ = 1;
};

}  // namespace calserve::test
