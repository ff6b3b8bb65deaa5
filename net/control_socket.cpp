// Unix-domain control socket server and its synchronous client. See control_socket.hpp.
#include "net/control_socket.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>

namespace calserve::net {
namespace asio = boost::asio;
using local = asio::local::stream_protocol;
using asio::use_awaitable;

struct control_server::impl : std::enable_shared_from_this<impl> {
    impl(asio::io_context& c, control_target& t, control_options o)
        : ioc(c), target(t), options(std::move(o)), strand(asio::make_strand(c)) {}
    asio::io_context& ioc;
    control_target& target;
    control_options options;
    asio::strand<asio::io_context::executor_type> strand;   // acceptor's
    std::optional<local::acceptor> acceptor;
    std::atomic<bool> stopped{false};
    bool bound = false;
    std::mutex mutex;
    std::map<std::uint64_t, std::function<void()>> conns;   // guarded by mutex: closers
    std::uint64_t next_conn = 0;                             // guarded by mutex
};

namespace {
std::string errno_text() { return std::strerror(errno); }

// The directory must be ours and writable by nobody else; created 0700 when missing.
void_result check_directory(const std::filesystem::path& dir) {
    std::error_code ec;
    if (!std::filesystem::exists(dir, ec)) {
        std::filesystem::create_directories(dir, ec);
        if (ec) return make_error(status::io_error, "control socket directory " + dir.string() + ": " + ec.message());
        if (::chmod(dir.c_str(), 0700) != 0) return make_error(status::io_error, "chmod " + dir.string() + ": " + errno_text());
    }
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) return make_error(status::io_error, "stat " + dir.string() + ": " + errno_text());
    if (!S_ISDIR(st.st_mode)) return make_error(status::invalid_argument, dir.string() + " is not a directory");
    if (st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
        return make_error(status::invalid_argument,
                          "control socket directory " + dir.string() + " must be owned by uid " +
                              std::to_string(::geteuid()) + " and writable by nobody else");
    }
    return {};
}

// A stale socket of ours may be replaced; anything else at the path is refused.
void_result clear_stale(const std::string& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return {};
    if (!S_ISSOCK(st.st_mode) || st.st_uid != ::geteuid()) {
        return make_error(status::invalid_argument, path + " exists and is not a socket of ours");
    }
    if (::unlink(path.c_str()) != 0) return make_error(status::io_error, "unlink " + path + ": " + errno_text());
    return {};
}

std::optional<std::uint32_t> peer_uid(local::socket& s) {
    struct ucred cred {};
    socklen_t len = sizeof cred;
    if (::getsockopt(s.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return std::nullopt;
    return cred.uid;
}

asio::awaitable<void> write_line(local::socket& s, std::string line) {
    line += '\n';
    auto [ec, n] = co_await asio::async_write(s, asio::buffer(line), asio::as_tuple(use_awaitable));
    (void)ec;
    (void)n;
}

asio::awaitable<void> run_connection(std::shared_ptr<control_server::impl> srv, local::socket socket) {
    const std::uint32_t allowed = srv->options.allowed_uid.value_or(::geteuid());
    const auto uid = peer_uid(socket);
    if (!uid || *uid != allowed) {
        std::string refusal = R"({"id":null,"ok":false,"error":{"code":"unauthorized","param":null,"message":"peer uid )" +
                              (uid ? std::to_string(*uid) : std::string("unknown")) + R"( refused"}})";
        co_await write_line(socket, std::move(refusal));
        co_return;
    }
    std::string buf;
    for (;;) {
        auto [ec, n] = co_await asio::async_read_until(socket, asio::dynamic_buffer(buf, k_max_line_bytes), '\n',
                                                       asio::as_tuple(use_awaitable));
        if (ec == asio::error::not_found) {
            std::string too_long =
                R"({"id":null,"ok":false,"error":{"code":"payload_too_large","param":"line","message":"line: longer than )" +
                std::to_string(k_max_line_bytes) + R"( bytes"}})";
            co_await write_line(socket, std::move(too_long));
            co_return;
        }
        if (ec) co_return;
        std::string line = buf.substr(0, n - 1);
        buf.erase(0, n);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty()) continue;
        std::string reply = handle_control_line(srv->target, line);
        co_await write_line(socket, std::move(reply));
    }
}

asio::awaitable<void> run_session(std::shared_ptr<control_server::impl> srv, local::socket socket) {
    auto s = std::make_shared<local::socket>(std::move(socket));
    std::weak_ptr<local::socket> weak = s;
    auto exec = s->get_executor();
    std::uint64_t id;
    {
        std::lock_guard lock(srv->mutex);
        id = srv->next_conn++;
        srv->conns[id] = [weak, exec] {
            asio::post(exec, [weak] {
                if (auto p = weak.lock()) {
                    boost::system::error_code ignored;
                    p->close(ignored);
                }
            });
        };
    }
    try {
        co_await run_connection(srv, std::move(*s));
    } catch (const std::exception&) {
        // The connection ends; the daemon goes on.
    }
    std::lock_guard lock(srv->mutex);
    srv->conns.erase(id);
}

asio::awaitable<void> run_accept(std::shared_ptr<control_server::impl> srv) {
    for (;;) {
        auto [ec, socket] = co_await srv->acceptor->async_accept(asio::make_strand(srv->ioc), asio::as_tuple(use_awaitable));
        if (srv->stopped.load()) co_return;
        if (ec) {
            if (ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor) co_return;
            continue;
        }
        auto exec = socket.get_executor();
        asio::co_spawn(exec, run_session(srv, std::move(socket)), asio::detached);
    }
}
}  // namespace

control_server::control_server(asio::io_context& ioc, control_target& target, control_options options)
    : impl_(std::make_shared<impl>(ioc, target, std::move(options))) {}

control_server::~control_server() { stop(); }

void_result control_server::start() {
    auto& s = *impl_;
    const std::string& path = s.options.path;
    if (path.empty() || path.size() >= sizeof(sockaddr_un::sun_path)) {
        return make_error(status::invalid_argument, "server.control_socket: path empty or too long");
    }
    auto dir = std::filesystem::absolute(path).parent_path();
    if (auto r = check_directory(dir); !r) return r;
    if (auto r = clear_stale(path); !r) return r;
    boost::system::error_code ec;
    s.acceptor.emplace(s.strand);
    s.acceptor->open(local(), ec);
    if (!ec) s.acceptor->bind(local::endpoint(path), ec);
    if (ec) return make_error(status::io_error, "control socket " + path + ": " + ec.message());
    s.bound = true;
    // Owner only. Binding already happened inside an owner-only directory, and every
    // peer is checked by uid, so the instant before this chmod grants nothing.
    if (::chmod(path.c_str(), 0600) != 0) return make_error(status::io_error, "chmod " + path + ": " + errno_text());
    s.acceptor->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return make_error(status::io_error, "control socket " + path + ": " + ec.message());
    asio::co_spawn(s.strand, run_accept(impl_), asio::detached);
    return {};
}

void control_server::stop() {
    if (impl_->stopped.exchange(true)) return;
    auto srv = impl_;
    if (srv->acceptor) {
        asio::post(srv->strand, [srv] {
            boost::system::error_code ignored;
            srv->acceptor->close(ignored);
        });
    }
    std::map<std::uint64_t, std::function<void()>> conns;
    {
        std::lock_guard lock(srv->mutex);
        conns = srv->conns;
    }
    for (auto& [id, close] : conns) close();
    if (srv->bound) ::unlink(srv->options.path.c_str());
}

result<std::string> control_call(const std::string& path, const std::string& request_line, int timeout_ms) {
    if (path.size() >= sizeof(sockaddr_un::sun_path)) return make_error(status::invalid_argument, "socket path too long");
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return make_error(status::io_error, "socket: " + errno_text());
    struct fd_guard {
        int fd;
        ~fd_guard() { ::close(fd); }
    } guard{fd};
    timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        return make_error(status::io_error, "connect " + path + ": " + errno_text());
    }
    return control_exchange(fd, request_line);
}

result<std::string> control_exchange(int fd, const std::string& request_line) {
    std::string out = request_line + "\n";
    for (std::size_t off = 0; off < out.size();) {
        ssize_t n = ::send(fd, out.data() + off, out.size() - off, MSG_NOSIGNAL);
        if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) break;  // closed on us: its answer may be waiting
        if (n <= 0) return make_error(status::io_error, "send: " + errno_text());
        off += static_cast<std::size_t>(n);
    }
    std::string in;
    char buf[4096];
    while (in.find('\n') == std::string::npos) {
        ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n == 0) return make_error(status::io_error, "control socket closed before replying");
        if (n < 0) return make_error(status::io_error, "recv: " + errno_text());
        in.append(buf, static_cast<std::size_t>(n));
        if (in.size() > 64 * k_max_line_bytes) return make_error(status::io_error, "reply too long");
    }
    in.resize(in.find('\n'));
    return in;
}

}  // namespace calserve::net
