#pragma once
// A `calserve serve` child process for end-to-end tests over loopback: started
// with --port 0, its port read from its first stdout line, stopped with SIGTERM
// (whose exit status the tests check: a drained daemon exits 0).
#include <csignal>
#include <string>
#include <vector>

namespace calserve::test {

// How the child is started beyond its arguments.
struct daemon_launch {
    std::string stderr_path;     // the child's stderr (its log) goes to this file; empty = inherited
    long nofile_limit = 0;       // RLIMIT_NOFILE set in the child before exec; 0 = inherited
};

class daemon_process {
public:
    explicit daemon_process(std::vector<std::string> args, daemon_launch launch = {});
    ~daemon_process();
    daemon_process(const daemon_process&) = delete;
    daemon_process& operator=(const daemon_process&) = delete;

    bool started() const { return port_ != 0; }
    std::uint16_t port() const { return port_; }
    const std::string& banner() const { return banner_; }
    // Sends `sig` and waits (bounded) for the exit; returns the exit code, or -1.
    int stop(int sig = SIGTERM, int wait_seconds = 60);
    void signal(int sig);
    // Waits for the exit (bounded); returns the exit code, or -1 if still running.
    int wait_exit(int wait_seconds);

private:
    int pid_ = -1;
    std::uint16_t port_ = 0;
    std::string banner_;
    int exit_code_ = -2;
};

}  // namespace calserve::test
