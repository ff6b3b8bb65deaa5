// Bounded, drop-counting trace writer with one writer thread.
#include "io/trace_writer.hpp"

#include <memory>
#include <vector>

namespace calserve::io {

result<std::unique_ptr<trace_writer>> trace_writer::open(const std::string& path, std::size_t capacity) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (!f) return make_error(status::io_error, "trace: cannot create " + path);
    return std::unique_ptr<trace_writer>(new trace_writer(f, capacity == 0 ? 1 : capacity));
}

trace_writer::trace_writer(std::FILE* file, std::size_t capacity)
    : file_(file), capacity_(capacity), thread_([this] { run(); }) {}

trace_writer::~trace_writer() { (void)close(); }

void trace_writer::push(std::string line) {
    {
        std::lock_guard lock(mutex_);
        if (closing_ || queue_.size() >= capacity_) {
            ++dropped_;
            return;
        }
        queue_.push_back(std::move(line));
    }
    wake_writer_.notify_one();
}

void trace_writer::wait_for_room() {
    std::unique_lock lock(mutex_);
    room_.wait(lock, [&] { return closing_ || queue_.size() <= capacity_ / 2; });
}

void trace_writer::run() {
    std::vector<std::string> batch;
    std::unique_lock lock(mutex_);
    while (true) {
        wake_writer_.wait(lock, [&] { return closing_ || !queue_.empty(); });
        if (queue_.empty() && closing_) break;
        batch.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
        queue_.clear();
        lock.unlock();
        room_.notify_all();
        bool ok = true;
        for (auto& line : batch) {
            line.push_back('\n');
            ok = ok && std::fwrite(line.data(), 1, line.size(), file_) == line.size();
        }
        lock.lock();
        written_ += batch.size();
        io_error_ = io_error_ || !ok;
    }
}

void_result trace_writer::close() {
    {
        std::lock_guard lock(mutex_);
        if (!file_) return {};
        closing_ = true;
    }
    wake_writer_.notify_all();
    room_.notify_all();
    if (thread_.joinable()) thread_.join();
    bool ok = std::fclose(file_) == 0 && !io_error_;
    file_ = nullptr;
    if (!ok) return make_error(status::io_error, "trace: write failed");
    return {};
}

std::uint64_t trace_writer::dropped() const {
    std::lock_guard lock(mutex_);
    return dropped_;
}
std::uint64_t trace_writer::written() const {
    std::lock_guard lock(mutex_);
    return written_;
}

}  // namespace calserve::io
