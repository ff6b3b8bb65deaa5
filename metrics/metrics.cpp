// Prometheus registry and text exposition (format 0.0.4). See metrics.hpp.
#include "metrics/metrics.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <mutex>
#include <stdexcept>

namespace calserve::metrics {

void counter::inc(double v) {
    if (!(v > 0.0)) return;  // also drops NaN: a counter never goes down
    value_.fetch_add(v, std::memory_order_relaxed);
}

void gauge::add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }

histogram::histogram(std::span<const double> bounds)
    : bounds_(bounds.begin(), bounds.end()), counts_(new std::atomic<std::uint64_t>[bounds.size() + 1]) {
    for (std::size_t i = 0; i + 1 < bounds_.size(); ++i) {
        if (!(bounds_[i] < bounds_[i + 1])) throw std::invalid_argument("histogram bounds must increase");
    }
    for (std::size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void histogram::observe(double v) {
    if (std::isnan(v)) return;
    auto it = std::lower_bound(bounds_.begin(), bounds_.end(), v);  // first bound >= v: "le" semantics
    counts_[static_cast<std::size_t>(it - bounds_.begin())].fetch_add(1, std::memory_order_relaxed);
    sum_.fetch_add(v, std::memory_order_relaxed);
}

std::uint64_t histogram::count() const {
    std::uint64_t n = 0;
    for (std::size_t i = 0; i <= bounds_.size(); ++i) n += bucket_count(i);
    return n;
}

std::span<const double> latency_buckets() {
    static constexpr double b[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                   0.25,   0.5,   1,      2.5,   5,    10,    30,   60};
    return b;
}

std::span<const double> fast_buckets() {
    static constexpr double b[] = {1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3,
                                   5e-3, 1e-2,   2.5e-2, 5e-2, 0.1,  0.25, 0.5,  1};
    return b;
}

// ---------------------------------------------------------------------------
// Families

class family_base {
public:
    family_base(std::string name, std::string help, metric_type type, std::vector<std::string> label_names,
                std::span<const double> bounds)
        : name_(std::move(name)), help_(std::move(help)), type_(type), label_names_(std::move(label_names)),
          bounds_(bounds.begin(), bounds.end()) {}

    template <class Metric>
    Metric& series(std::initializer_list<std::string_view> values);
    void render(std::string& out) const;

private:
    struct entry {
        std::unique_ptr<counter> c;
        std::unique_ptr<gauge> g;
        std::unique_ptr<histogram> h;
    };
    void render_labels(std::string& out, const std::vector<std::string>& values, std::string_view le) const;

    std::string name_;
    std::string help_;
    metric_type type_;
    std::vector<std::string> label_names_;
    std::vector<double> bounds_;
    mutable std::mutex mutex_;
    std::map<std::vector<std::string>, entry> series_;  // guarded by mutex_; label values -> series
};

template <class Metric>
Metric& family_base::series(std::initializer_list<std::string_view> values) {
    if (values.size() != label_names_.size()) {
        throw std::invalid_argument("metric " + name_ + ": wrong number of label values");
    }
    std::vector<std::string> key(values.begin(), values.end());
    std::lock_guard lock(mutex_);
    auto& e = series_[std::move(key)];
    if constexpr (std::is_same_v<Metric, counter>) {
        if (!e.c) e.c = std::make_unique<counter>();
        return *e.c;
    } else if constexpr (std::is_same_v<Metric, gauge>) {
        if (!e.g) e.g = std::make_unique<gauge>();
        return *e.g;
    } else {
        if (!e.h) e.h = std::make_unique<histogram>(bounds_);
        return *e.h;
    }
}

template <class Metric>
Metric& family<Metric>::labels(std::initializer_list<std::string_view> values) {
    return base_->series<Metric>(values);
}
template class family<counter>;
template class family<gauge>;
template class family<histogram>;

namespace {
std::string format_value(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    char buf[64];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    return ec == std::errc{} ? std::string(buf, end) : std::string("NaN");
}

void append_escaped(std::string& out, std::string_view s, bool quote_too) {
    for (char ch : s) {
        if (ch == '\\') out += "\\\\";
        else if (ch == '\n') out += "\\n";
        else if (ch == '"' && quote_too) out += "\\\"";
        else out += ch;
    }
}

const char* type_name(metric_type t) {
    switch (t) {
        case metric_type::counter: return "counter";
        case metric_type::gauge: return "gauge";
        case metric_type::histogram: return "histogram";
    }
    return "untyped";
}

bool valid_name(std::string_view s, bool allow_colon) {
    if (s.empty()) return false;
    for (std::size_t i = 0; i < s.size(); ++i) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (allow_colon && c == ':') ||
                  (i > 0 && c >= '0' && c <= '9');
        if (!ok) return false;
    }
    return true;
}
}  // namespace

void family_base::render_labels(std::string& out, const std::vector<std::string>& values,
                                std::string_view le) const {
    if (values.empty() && le.empty()) return;
    out += '{';
    bool first = true;
    for (std::size_t i = 0; i < values.size(); ++i) {
        if (!first) out += ',';
        first = false;
        out += label_names_[i];
        out += "=\"";
        append_escaped(out, values[i], true);
        out += '"';
    }
    if (!le.empty()) {
        if (!first) out += ',';
        out += "le=\"";
        out += le;
        out += '"';
    }
    out += '}';
}

void family_base::render(std::string& out) const {
    out += "# HELP " + name_ + ' ';
    append_escaped(out, help_, false);
    out += "\n# TYPE " + name_ + ' ' + type_name(type_) + '\n';
    std::lock_guard lock(mutex_);
    for (const auto& [values, e] : series_) {
        if (type_ != metric_type::histogram) {
            out += name_;
            render_labels(out, values, {});
            out += ' ' + format_value(type_ == metric_type::counter ? e.c->value() : e.g->value()) + '\n';
            continue;
        }
        std::uint64_t cumulative = 0;
        for (std::size_t i = 0; i <= bounds_.size(); ++i) {
            cumulative += e.h->bucket_count(i);
            out += name_ + "_bucket";
            render_labels(out, values, i < bounds_.size() ? format_value(bounds_[i]) : "+Inf");
            out += ' ' + std::to_string(cumulative) + '\n';
        }
        out += name_ + "_sum";
        render_labels(out, values, {});
        out += ' ' + format_value(e.h->sum()) + '\n';
        out += name_ + "_count";
        render_labels(out, values, {});
        out += ' ' + std::to_string(cumulative) + '\n';
    }
}

// ---------------------------------------------------------------------------
// Registry

struct registry::impl {
    std::mutex mutex;                                  // guards families (registration vs render)
    std::vector<std::unique_ptr<family_base>> families;

    family_base* add(std::string name, std::string help, metric_type type, std::vector<std::string> labels,
                     std::span<const double> bounds) {
        if (!valid_name(name, true)) throw std::invalid_argument("bad metric name: " + name);
        if (type == metric_type::counter && !name.ends_with("_total")) {
            throw std::invalid_argument("counter name must end in _total: " + name);
        }
        for (const auto& l : labels) {
            if (!valid_name(l, false) || l.starts_with("__") || l == "le") {
                throw std::invalid_argument("bad label name: " + l);
            }
        }
        std::lock_guard lock(mutex);
        if (std::find(names.begin(), names.end(), name) != names.end()) {
            throw std::invalid_argument("duplicate metric: " + name);
        }
        names.push_back(name);
        families.push_back(std::make_unique<family_base>(std::move(name), std::move(help), type,
                                                         std::move(labels), bounds));
        return families.back().get();
    }
    std::vector<std::string> names;
    std::vector<std::function<void()>> collectors;     // guarded by mutex
};

registry::registry() : impl_(std::make_unique<impl>()) {}
registry::~registry() = default;

family<counter> registry::add_counter(std::string name, std::string help, std::vector<std::string> label_names) {
    return family<counter>(impl_->add(std::move(name), std::move(help), metric_type::counter,
                                      std::move(label_names), {}));
}

family<gauge> registry::add_gauge(std::string name, std::string help, std::vector<std::string> label_names) {
    return family<gauge>(impl_->add(std::move(name), std::move(help), metric_type::gauge, std::move(label_names), {}));
}

family<histogram> registry::add_histogram(std::string name, std::string help, std::span<const double> bounds,
                                          std::vector<std::string> label_names) {
    return family<histogram>(impl_->add(std::move(name), std::move(help), metric_type::histogram,
                                        std::move(label_names), bounds));
}

void registry::add_collector(std::function<void()> refresh) {
    std::lock_guard lock(impl_->mutex);
    impl_->collectors.push_back(std::move(refresh));
}

std::string registry::render() const {
    std::vector<std::function<void()>> collectors;
    {
        std::lock_guard lock(impl_->mutex);
        collectors = impl_->collectors;
    }
    for (const auto& refresh : collectors) refresh();
    std::string out;
    std::lock_guard lock(impl_->mutex);
    for (const auto& f : impl_->families) f->render(out);
    return out;
}

}  // namespace calserve::metrics
