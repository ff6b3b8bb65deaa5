#pragma once
// A `calserve serve` child process for end-to-end tests over loopback: started
// with --port 0 (or a given port), its port read from its first stdout line, stopped with SIGTERM
// (whose exit status the tests check: a drained daemon exits 0).
#include <csignal>
#include <cstdint>
#include <string>
#include <vector>

namespace calserve::test {

// How the child is started beyond its arguments.
struct daemon_options {
    std::string stderr_path;     // the child's stderr (its log) goes to this file; empty = inherited
    long nofile_limit = 0;       // RLIMIT_NOFILE set in the child before exec; 0 = inherited
    bool stderr_pipe = false;    // the daemon's stderr goes to a pipe the test reads (or closes)
    bool wait_ready = true;      // wait for /ready after the banner
    std::uint16_t port = 0;      // --port; 0 = a free one (a restart passes the port it had)
};

class daemon_process {
public:
    explicit daemon_process(std::vector<std::string> args, daemon_options options = {});
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
    int pid() const { return pid_; }
    // With stderr_pipe: closes the read end, so the daemon's next log write meets a
    // pipe with no reader (EPIPE, or SIGPIPE if not ignored).
    void close_stderr();

private:
    int stderr_fd_ = -1;

public:
private:
    int pid_ = -1;
    std::uint16_t port_ = 0;
    std::string banner_;
    int exit_code_ = -2;
};

}  // namespace calserve::test
