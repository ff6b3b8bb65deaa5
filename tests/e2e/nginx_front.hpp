#pragma once
// The nginx front of deploy/nginx/ for end-to-end tests: the real nginx binary
// (installed by tools/bootstrap) run with `-p` a scratch directory holding
// calserve.conf as shipped, an upstreams.conf made from the first line of
// upstreams.conf.example (one line per daemon, its address replaced) and a
// listen.conf on a free loopback port. Run as root (CI), nginx is started as
// `nobody` so the test also shows that the configuration needs no privilege.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace calserve::test {

// nginx's path, or empty when it is not installed.
std::string nginx_binary();

class nginx_front {
public:
    explicit nginx_front(const std::vector<std::uint16_t>& daemon_ports);
    ~nginx_front();
    nginx_front(const nginx_front&) = delete;
    nginx_front& operator=(const nginx_front&) = delete;

    bool started() const { return port_ != 0; }
    std::uint16_t port() const { return port_; }
    const std::filesystem::path& dir() const { return dir_; }
    // Graceful stop (SIGQUIT: open requests finish, the access log is complete); exit code.
    int stop();
    std::string access_log() const;
    std::string error_log() const;

private:
    std::filesystem::path dir_;
    int pid_ = -1;
    std::uint16_t port_ = 0;
};

// One access-log line of deploy/nginx/calserve.conf's `calserve` format.
struct access_entry {
    std::string request_id;
    std::string upstream;   // the daemon that answered last ("127.0.0.1:PORT"), "-" if none
    int status = 0;
};
std::vector<access_entry> parse_access_log(const std::string& text);

}  // namespace calserve::test
