#include "tests/e2e/daemon.hpp"

#include <chrono>
#include <cstdio>
#include <poll.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "tests/support/test_paths.hpp"

namespace calserve::test {

daemon_process::daemon_process(std::vector<std::string> args) {
    int out[2];
    if (::pipe(out) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
        ::dup2(out[1], STDOUT_FILENO);
        ::close(out[0]);
        ::close(out[1]);
        std::string bin = calserve_binary().string();
        std::vector<char*> argv{bin.data(), const_cast<char*>("serve"), const_cast<char*>("--port"),
                                const_cast<char*>("0")};
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        ::execv(bin.c_str(), argv.data());
        ::_exit(127);
    }
    ::close(out[1]);
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
    if (line.find("http://") != std::string::npos && colon != std::string::npos)
        port_ = std::uint16_t(std::stoi(line.substr(colon + 1)));
}

daemon_process::~daemon_process() {
    if (exit_code_ == -2 && pid_ > 0) stop(SIGKILL, 10);
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
