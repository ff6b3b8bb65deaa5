#include "tests/e2e/daemon.hpp"

#include <chrono>
#include <cstdio>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <string_view>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "tests/support/test_paths.hpp"

namespace calserve::test {

namespace {
// GET /ready over a plain socket: true on a 200 answer.
bool ready(std::uint16_t port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return false;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = false;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
        const char req[] = "GET /ready HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
        if (::write(fd, req, sizeof req - 1) == ssize_t(sizeof req - 1)) {
            char buf[64] = {};
            auto n = ::read(fd, buf, sizeof buf - 1);
            ok = n > 12 && std::string_view(buf, std::size_t(n)).substr(9, 3) == "200";
        }
    }
    ::close(fd);
    return ok;
}
}  // namespace

daemon_process::daemon_process(std::vector<std::string> args, daemon_options options) {
    int out[2];
    if (::pipe(out) != 0) return;
    int err[2] = {-1, -1};
    if (options.stderr_pipe && ::pipe(err) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
        if (options.nofile_limit > 0) {
            rlimit rl{rlim_t(options.nofile_limit), rlim_t(options.nofile_limit)};
            if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) ::_exit(126);
        }
        if (!options.stderr_path.empty()) {
            int log_fd = ::open(options.stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
            if (log_fd < 0) ::_exit(126);
            ::dup2(log_fd, STDERR_FILENO);
            ::close(log_fd);
        }
        ::dup2(out[1], STDOUT_FILENO);
        ::close(out[0]);
        ::close(out[1]);
        if (options.stderr_pipe) {
            ::dup2(err[1], STDERR_FILENO);
            ::close(err[0]);
            ::close(err[1]);
        }
        // Only stdin/stdout/stderr: descriptors the test runner leaked to us would count against
        // nofile_limit and make the daemon's descriptor budget depend on the machine.
        ::close_range(3, ~0U, 0);
        std::string bin = calserve_binary().string();
        std::string port = std::to_string(options.port);
        std::vector<char*> argv{bin.data(), const_cast<char*>("serve"), const_cast<char*>("--port"), port.data()};
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        ::execv(bin.c_str(), argv.data());
        ::_exit(127);
    }
    ::close(out[1]);
    if (options.stderr_pipe) {
        ::close(err[1]);
        stderr_fd_ = err[0];
    }
    // The banner: "calserve: serving 'NAME' on http://HOST:PORT (...)".
    pollfd p{out[0], POLLIN, 0};
    std::string line;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
        if (::poll(&p, 1, 200) <= 0) continue;
        char buf[512];
        auto n = ::read(out[0], buf, sizeof buf);
        if (n <= 0) break;
        line.append(buf, std::size_t(n));
    }
    ::close(out[0]);
    banner_ = line;
    auto colon = line.rfind(':', line.find(" (", line.find("http://")));
    if (line.find("http://") == std::string::npos || colon == std::string::npos) return;
    port_ = std::uint16_t(std::stoi(line.substr(colon + 1)));
    // Serving starts once the device is configured and warmed up: wait for /ready.
    while (options.wait_ready && std::chrono::steady_clock::now() < deadline && !ready(port_))
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

daemon_process::~daemon_process() {
    if (exit_code_ == -2 && pid_ > 0) stop(SIGKILL, 10);
    close_stderr();
}

void daemon_process::close_stderr() {
    if (stderr_fd_ >= 0) ::close(stderr_fd_);
    stderr_fd_ = -1;
}

void daemon_process::signal(int sig) {
    if (pid_ > 0) ::kill(pid_, sig);
}

int daemon_process::wait_exit(int wait_seconds) {
    if (exit_code_ != -2) return exit_code_;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(wait_seconds);
    while (std::chrono::steady_clock::now() < deadline) {
        int st = 0;
        if (::waitpid(pid_, &st, WNOHANG) == pid_) {
            exit_code_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            return exit_code_;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
}

int daemon_process::stop(int sig, int wait_seconds) {
    if (pid_ <= 0) return -1;
    signal(sig);
    int code = wait_exit(wait_seconds);
    if (code == -1) {
        ::kill(pid_, SIGKILL);
        code = wait_exit(10);
    }
    return code;
}

}  // namespace calserve::test
