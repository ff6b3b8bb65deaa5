#include "tests/e2e/browser.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/core/detail/base64.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <cstdlib>
#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <poll.h>
#include <stdexcept>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "tests/support/test_paths.hpp"

namespace calserve::test {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace json = boost::json;
using tcp = asio::ip::tcp;

namespace {
constexpr auto k_start_bound = std::chrono::seconds(60);   // a loaded machine starts a browser slowly
constexpr int k_reply_timeout_s = 60;                      // one DevTools reply

std::string find_on_path(const std::string& name) {
    const char* path = std::getenv("PATH");
    if (!path) return {};
    std::string p = path;
    std::size_t start = 0;
    while (start <= p.size()) {
        auto end = p.find(':', start);
        if (end == std::string::npos) end = p.size();
        auto candidate = std::filesystem::path(p.substr(start, end - start)) / name;
        if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
        start = end + 1;
    }
    return {};
}

// Reads the browser's stderr until "DevTools listening on ws://HOST:PORT/..."; returns the port or 0.
std::uint16_t read_devtools_port(int fd) {
    std::string seen;
    const auto deadline = std::chrono::steady_clock::now() + k_start_bound;
    constexpr std::string_view k_marker = "DevTools listening on ws://";
    while (std::chrono::steady_clock::now() < deadline) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 200) <= 0) continue;
        char buf[4096];
        auto n = ::read(fd, buf, sizeof buf);
        if (n <= 0) return 0;
        seen.append(buf, std::size_t(n));
        auto at = seen.find(k_marker);
        if (at == std::string::npos) continue;
        auto host_end = seen.find(':', at + k_marker.size());
        auto port_end = seen.find('/', host_end);
        if (host_end == std::string::npos || port_end == std::string::npos) continue;
        return std::uint16_t(std::stoi(seen.substr(host_end + 1, port_end - host_end - 1)));
    }
    return 0;
}

std::string http_get(std::uint16_t port, const std::string& target) {
    asio::io_context ioc;
    tcp::socket s(ioc);
    s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    http::request<http::empty_body> req{http::verb::get, target, 11};
    req.set(http::field::host, "127.0.0.1");
    http::write(s, req);
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    http::read(s, buf, res);
    return res.body();
}
}  // namespace

std::string chromium_binary() {
    if (const char* env = std::getenv("CALSERVE_CHROMIUM"); env && *env) return env;
    for (const char* name : {"chromium", "chromium-browser"})
        if (auto p = find_on_path(name); !p.empty()) return p;
    return {};
}

struct browser_page::impl {
    pid_t pid = -1;
    int err_fd = -1;
    std::filesystem::path profile;
    asio::io_context ioc;
    std::optional<websocket::stream<tcp::socket>> ws;
};

browser_page::browser_page(const std::string& binary) : impl_(std::make_unique<impl>()) {
    impl_->profile = scratch_dir("chromium-profile");
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
        failure_ = "pipe failed";
        return;
    }
    std::vector<std::string> args{binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                  "--no-default-browser-check", "--disable-extensions", "--disable-sync",
                                  "--disable-background-networking", "--disable-component-update",
                                  "--disable-dev-shm-usage", "--window-size=1280,900",
                                  "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
                                  "--user-data-dir=" + impl_->profile.string(), "about:blank"};
    impl_->pid = ::fork();
    if (impl_->pid == 0) {
        ::dup2(fds[1], 2);
        int devnull = ::open("/dev/null", O_RDWR);
        ::dup2(devnull, 0);
        ::dup2(devnull, 1);
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        ::execv(argv[0], argv.data());
        ::_exit(127);
    }
    ::close(fds[1]);
    impl_->err_fd = fds[0];
    const auto port = read_devtools_port(impl_->err_fd);
    if (port == 0) {
        failure_ = "chromium did not report its DevTools port within " + std::to_string(k_start_bound.count()) + " s";
        return;
    }
    try {
        auto targets = json::parse(http_get(port, "/json/list")).as_array();
        std::string url;
        for (const auto& t : targets)
            if (t.at("type").as_string() == "page") url = std::string(t.at("webSocketDebuggerUrl").as_string());
        if (url.empty()) {
            failure_ = "chromium has no page target";
            return;
        }
        const auto path = url.substr(url.find('/', std::string("ws://").size()));
        tcp::socket sock(impl_->ioc);
        sock.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
        timeval tv{k_reply_timeout_s, 0};
        ::setsockopt(sock.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        impl_->ws.emplace(std::move(sock));
        impl_->ws->read_message_max(256 << 20);  // screenshots
        impl_->ws->handshake("127.0.0.1:" + std::to_string(port), path);
        started_ = true;
    } catch (const std::exception& e) {
        failure_ = std::string("DevTools connection failed: ") + e.what();
    }
}

browser_page::~browser_page() {
    if (impl_->ws) {
        beast::error_code ignored;
        impl_->ws->next_layer().close(ignored);
    }
    if (impl_->pid > 0) {
        ::kill(impl_->pid, SIGTERM);
        for (int i = 0; i < 100; ++i) {
            if (::waitpid(impl_->pid, nullptr, WNOHANG) == impl_->pid) {
                impl_->pid = -1;
                break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        if (impl_->pid > 0) {
            ::kill(impl_->pid, SIGKILL);
            ::waitpid(impl_->pid, nullptr, 0);
        }
    }
    if (impl_->err_fd >= 0) ::close(impl_->err_fd);
    std::error_code ec;
    std::filesystem::remove_all(impl_->profile, ec);
}

void browser_page::on_event(const json::object& msg) {
    const auto method = std::string(msg.at("method").as_string());
    const auto& params = msg.at("params").as_object();
    if (method == "Runtime.consoleAPICalled" && params.at("type").as_string() == "error") {
        errors_.push_back("console.error: " + json::serialize(params.at("args")));
    } else if (method == "Runtime.exceptionThrown") {
        errors_.push_back("exception: " + json::serialize(params.at("exceptionDetails")));
    } else if (method == "Log.entryAdded") {
        const auto& entry = params.at("entry").as_object();
        if (entry.at("level").as_string() == "error") errors_.push_back("log: " + json::serialize(entry));
    }
}

json::object browser_page::call(const std::string& method, json::object params) {
    const auto id = next_id_++;
    json::object msg{{"id", id}, {"method", method}, {"params", std::move(params)}};
    impl_->ws->write(asio::buffer(json::serialize(msg)));
    for (;;) {
        beast::flat_buffer buf;
        impl_->ws->read(buf);  // SO_RCVTIMEO bounds the wait: a silent browser throws
        auto reply = json::parse(beast::buffers_to_string(buf.data())).as_object();
        if (reply.contains("method")) {
            on_event(reply);
            continue;
        }
        if (!reply.contains("id") || reply.at("id").to_number<std::int64_t>() != id) continue;
        if (reply.contains("error")) throw std::runtime_error(method + ": " + json::serialize(reply.at("error")));
        return reply.at("result").as_object();
    }
}

json::value browser_page::eval(const std::string& expression) {
    auto r = call("Runtime.evaluate", {{"expression", expression}, {"returnByValue", true}, {"awaitPromise", true}});
    if (r.contains("exceptionDetails"))
        throw std::runtime_error("evaluate failed: " + expression + ": " + json::serialize(r.at("exceptionDetails")));
    const auto& result = r.at("result").as_object();
    return result.contains("value") ? result.at("value") : json::value(nullptr);
}

bool browser_page::wait_for(const std::string& expression, std::chrono::seconds bound) {
    const auto deadline = std::chrono::steady_clock::now() + bound;
    for (;;) {
        // Before the page has loaded the expression may throw (no such element yet): not yet true.
        auto v = eval("(() => { try { return Boolean(" + expression + "); } catch (e) { return false; } })()");
        if (v.is_bool() && v.as_bool()) return true;
        if (std::chrono::steady_clock::now() >= deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
}

std::string browser_page::screenshot_png() {
    auto r = call("Page.captureScreenshot", {{"format", "png"}, {"captureBeyondViewport", true}});
    const auto& data = r.at("data").as_string();
    std::string out(beast::detail::base64::decoded_size(data.size()), '\0');
    auto [written, read] = beast::detail::base64::decode(out.data(), data.data(), data.size());
    (void)read;
    out.resize(written);
    return out;
}

}  // namespace calserve::test
