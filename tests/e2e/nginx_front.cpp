#include "tests/e2e/nginx_front.hpp"

#include <arpa/inet.h>
#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <fstream>
#include <grp.h>
#include <netinet/in.h>
#include <sstream>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "tests/support/test_paths.hpp"

namespace calserve::test {
namespace fs = std::filesystem;

namespace {
constexpr uid_t k_nobody = 65534;   // Debian's `nobody` / `nogroup`
constexpr auto k_start_bound = std::chrono::seconds(30);

std::string read_file(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

bool connects(std::uint16_t port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return false;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    return ok;
}

std::uint16_t free_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    std::uint16_t port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
        port = ntohs(a.sin_port);
    ::close(fd);
    return port;
}

// upstreams.conf: the example's first line (the daemon at 127.0.0.1:8080) once per daemon.
std::string upstreams_for(const std::vector<std::uint16_t>& ports) {
    std::ifstream in(source_dir() / "deploy" / "nginx" / "upstreams.conf.example");
    std::string first;
    std::getline(in, first);
    const std::string example_addr = "127.0.0.1:8080";
    std::string out;
    for (auto p : ports) {
        std::string line = first;
        if (auto at = line.find(example_addr); at != std::string::npos)
            line.replace(at, example_addr.size(), "127.0.0.1:" + std::to_string(p));
        out += line + "\n";
    }
    return out;
}
}  // namespace

std::string nginx_binary() {
    for (const char* p : {"/usr/sbin/nginx", "/usr/bin/nginx"})
        if (::access(p, X_OK) == 0) return p;
    return {};
}

nginx_front::nginx_front(const std::vector<std::uint16_t>& daemon_ports) {
    dir_ = scratch_dir("nginx-front");
    fs::create_directories(dir_ / "logs");
    fs::create_directories(dir_ / "tmp");
    fs::copy_file(source_dir() / "deploy" / "nginx" / "calserve.conf", dir_ / "calserve.conf");
    std::ofstream(dir_ / "upstreams.conf") << upstreams_for(daemon_ports);
    const auto port = free_port();
    std::ofstream(dir_ / "listen.conf") << "listen 127.0.0.1:" << port << ";\n";
    const bool root = ::geteuid() == 0;
    if (root) {
        for (auto& e : fs::recursive_directory_iterator(dir_)) (void)::chown(e.path().c_str(), k_nobody, k_nobody);
        (void)::chown(dir_.c_str(), k_nobody, k_nobody);
    }
    const std::string bin = nginx_binary();
    pid_ = ::fork();
    if (pid_ == 0) {
        ::close_range(3, ~0U, 0);
        int log = ::open((dir_ / "logs" / "stderr.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (log >= 0) {
            ::dup2(log, STDOUT_FILENO);
            ::dup2(log, STDERR_FILENO);
            ::close(log);
        }
        if (root && (::setgroups(0, nullptr) != 0 || ::setgid(k_nobody) != 0 || ::setuid(k_nobody) != 0)) ::_exit(126);
        // -e: nginx's start-up log, before it reads the configuration, goes inside DIR too.
        ::execl(bin.c_str(), bin.c_str(), "-p", dir_.c_str(), "-e", "logs/error.log", "-c", "calserve.conf", "-g",
                "daemon off;", static_cast<char*>(nullptr));
        ::_exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + k_start_bound;
    while (std::chrono::steady_clock::now() < deadline) {
        if (connects(port)) {
            port_ = port;
            return;
        }
        int st = 0;
        if (::waitpid(pid_, &st, WNOHANG) == pid_) {
            pid_ = -1;
            return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

nginx_front::~nginx_front() {
    if (pid_ > 0) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
    }
}

int nginx_front::stop() {
    if (pid_ <= 0) return -1;
    ::kill(pid_, SIGQUIT);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    int st = 0;
    while (std::chrono::steady_clock::now() < deadline) {
        if (::waitpid(pid_, &st, WNOHANG) == pid_) {
            pid_ = -1;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
}

std::string nginx_front::access_log() const { return read_file(dir_ / "logs" / "access.log"); }

std::string nginx_front::error_log() const {
    return read_file(dir_ / "logs" / "error.log") + read_file(dir_ / "logs" / "stderr.log");
}

std::vector<access_entry> parse_access_log(const std::string& text) {
    std::vector<access_entry> out;
    std::istringstream in(text);
    std::string line;
    auto field = [](const std::string& l, const std::string& key) {
        auto at = l.find(" " + key + "=");
        if (at == std::string::npos) return std::string();
        at += key.size() + 2;
        // upstream=A, B: the list separates with ", "; the field ends at " name=".
        auto end = l.find('=', at);
        end = end == std::string::npos ? l.size() : l.rfind(' ', end);
        return l.substr(at, end - at);
    };
    while (std::getline(in, line)) {
        access_entry e;
        e.request_id = field(line, "rid");
        auto up = field(line, "upstream");
        if (auto comma = up.rfind(", "); comma != std::string::npos) up = up.substr(comma + 2);
        e.upstream = up;
        auto q = line.find("\" ");
        if (q != std::string::npos) e.status = std::atoi(line.c_str() + q + 2);
        out.push_back(e);
    }
    return out;
}

}  // namespace calserve::test
