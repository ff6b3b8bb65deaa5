#pragma once
//! The privileged control socket: a Unix-domain stream socket speaking
//! newline-delimited JSON, one response line per request line.
//!
//!   -> {"cmd":"fault.arm","id":7,"point":"wait_timeout","mode":"count","count":1}
//!   <- {"id":7,"ok":true,"result":{"arm_id":1}}
//!   <- {"id":7,"ok":false,"error":{"code":"invalid_argument","param":"count","message":"..."}}
//!
//! Commands (one table in control_socket.cpp): fault.arm, fault.clear,
//! fault.list, device.reset, drain, resume, stats, trace.start, trace.stop.
//!
//! Security: never TCP. The socket is created mode 0600 inside a directory that
//! must be owned by the daemon's user and writable by nobody else (created 0700
//! when missing; start() refuses otherwise). Each connection's peer uid
//! (SO_PEERCRED) must equal the allowed uid (the daemon's effective uid).
//!
//! Fault model: a malformed line gets a structured error and the connection stays
//! usable; a line over k_max_line_bytes gets an error and the connection closes;
//! nothing a client sends can stop the daemon.
#include <cstdint>
#include <memory>
#include <string>

#include "config/result.hpp"
#include "net/control_target.hpp"

namespace boost::asio {
class io_context;
}

namespace calserve::net {

inline constexpr std::size_t k_max_line_bytes = 64 * 1024;

struct control_options {
    std::string path;                       // socket path
    std::optional<std::uint32_t> allowed_uid;  // none = geteuid()
};

class control_server {
public:
    control_server(boost::asio::io_context& ioc, control_target& target, control_options options);
    ~control_server();
    control_server(const control_server&) = delete;
    control_server& operator=(const control_server&) = delete;

    void_result start();
    // Closes the listener and every connection, removes the socket file.
    void stop();

    struct impl;

private:
    std::shared_ptr<impl> impl_;
};

// Runs one request line against a target and returns the response line (no
// newline). The socket uses it; tests call it directly.
std::string handle_control_line(control_target& target, std::string_view line);

// Synchronous client (calserve ctl): sends one line, returns the response line.
result<std::string> control_call(const std::string& path, const std::string& request_line,
                                 int timeout_ms = 10000);
// The exchange on a connected socket `fd` (not closed here). A daemon may answer and close
// before reading the request (a refused peer): a send the peer no longer reads still
// returns the answer it left.
result<std::string> control_exchange(int fd, const std::string& request_line);

}  // namespace calserve::net
