#include "actors/kv_manager_actor.hpp"

#include <algorithm>

#include "actors/device_actor.hpp"
#include "actors/schedule_policy.hpp"
#include "metrics/metrics.hpp"
#include "config/invariant.hpp"

namespace calserve::actors {

kv_manager_actor::kv_manager_actor(runtime& rt, std::int64_t total_blocks, std::int64_t block_tokens,
                                   metrics::calserve_metrics* metrics, kv_cache_options cache)
    : actor(rt, "kv_manager"),
      pool_(total_blocks, block_tokens),
      cache_options_(cache),
      cache_(cache.block_tokens),
      metrics_(metrics) {
    // The index never holds more keys than the pool has cache blocks (every key is a
    // block some entry's KV holds): sized once, it never rehashes while serving.
    if (cache_options_.enabled)
        cache_.reserve(std::size_t(std::max<std::int64_t>(0, total_blocks * block_tokens / cache_.block_tokens())));
    publish();
}

void kv_manager_actor::wire(address<device_actor> device) { device_ = std::move(device); }

void kv_manager_actor::on_message(kv_manager_message& msg) {
    std::visit(
        [this](auto& m) {
            using T = std::decay_t<decltype(m)>;
            if constexpr (std::is_same_v<T, kv_reserve>) on_reserve(m);
            else if constexpr (std::is_same_v<T, kv_grow>) on_grow(m);
            else if constexpr (std::is_same_v<T, kv_extend>) on_extend(m);
            else if constexpr (std::is_same_v<T, kv_release>) on_release(m);
            else if constexpr (std::is_same_v<T, kv_drop_cache>) on_drop(m);
            else if constexpr (std::is_same_v<T, kv_share>) on_share(m);
            else on_expired(m);
        },
        msg);
    CALSERVE_INVARIANT(pool_.conserved(), "KV blocks not conserved");
    CALSERVE_INVARIANT(pool_.cached_sequences() == cache_.kept_entries(), "cached KV holdings differ from the cache's entries");
    publish();
}

bool kv_manager_actor::try_grant(kv_reserve& m) {
    const bool lookup = cache_options_.enabled && m.prefix && !m.prefix->empty();
    std::optional<prefix_cache::hit> hit;
    // At least the last prompt token is prefilled: its logits give the first token.
    prefix_cache::lookup_trace trace;  // the prompt's keys hashed and entry compared: its share reuses them
    if (lookup) hit = cache_.lookup(m.scope, m.prefix, std::int64_t(m.prefix->size()) - 1, trace);
    const std::int64_t need = pool_.blocks_for(m.tokens);
    if (!pool_.try_reserve(m.seq, m.tokens)) {
        if (!make_room(need, hit ? hit->source : 0)) {
            // Only the hit's own entry stands in the way: the room matters more than the hit.
            if (!hit || !make_room(need, 0)) return false;
            if (!cache_.contains(hit->source)) hit.reset();
        }
    }
    auto plan = pool_.try_reserve(m.seq, m.tokens);
    if (!plan) return false;
    kv_grant grant{m.seq, pool_.commit(*plan)};
    if (grant.outcome && lookup) {
        if (!trace.keys.empty()) prompt_traces_[m.seq] = std::move(trace);
        if (metrics_) metrics_->prefix_cache_queries.inc(double(m.prefix->size()));
        if (hit) {
            // Before the grant: any later free of the entry reaches the device after the copy.
            (void)device_.tell(da_kv_copy{hit->source, m.seq, hit->tokens, m.tokens, device_generation_}, id());
            copied_into_.insert(m.seq);
            grant.cached_tokens = hit->tokens;
            hit_tokens_ += hit->tokens;
            if (metrics_) metrics_->prefix_cache_hits.inc(double(hit->tokens));
        }
    }
    m.reply(std::move(grant));
    return true;
}

bool kv_manager_actor::make_room(std::int64_t blocks, sequence_id keep) {
    if (pool_.free_blocks() >= blocks) return true;
    std::int64_t evictable = pool_.cached_blocks();
    if (keep != 0 && pool_.is_cached(keep)) evictable -= pool_.reserved_tokens(keep) / pool_.block_tokens();
    if (pool_.free_blocks() + evictable < blocks) return false;
    while (pool_.free_blocks() < blocks) {
        auto victim = cache_.evict_lru(keep);
        if (!victim) return false;
        evict(*victim);
    }
    return true;
}

void kv_manager_actor::evict(sequence_id seq) {
    cache_.erase(seq);
    end_kv(seq, kv_end::evicted);
}

// The one place a sequence's blocks go back to the pool, and the one place the device is
// told to free a sequence's KV (da_kv_free): after any copy sent from it, in the order the
// KvManager decided them, whatever the cache setting.
void kv_manager_actor::end_kv(sequence_id seq, kv_end why) {
    pool_.release(seq);
    const bool copied = copied_into_.erase(seq) > 0;
    const bool on_device = why == kv_end::evicted || why == kv_end::dropped_on_device ||
                           why == kv_end::released || (why == kv_end::returned && copied);
    if (on_device) (void)device_.tell(da_kv_free{seq}, id());
    const bool entry = why == kv_end::evicted || why == kv_end::dropped_on_device || why == kv_end::device_lost;
    if (entry && metrics_) metrics_->prefix_cache_evictions.inc();
}

// A released sequence's device KV becomes a cache entry of its whole cache blocks;
// false when it does not (nothing whole to keep, or an entry already holds it).
bool kv_manager_actor::cache_on_release(const kv_release& m) {
    if (!cache_options_.enabled || !m.cache || !pool_.holds(m.seq) || pool_.is_cached(m.seq)) return false;
    const std::int64_t block = cache_.block_tokens();
    const std::int64_t keep = std::int64_t(m.cache->size()) / block * block;
    if (keep == 0) return false;
    auto redundant = cache_.insert(m.seq, m.scope, m.cache, std::size_t(keep));
    if (std::find(redundant.begin(), redundant.end(), m.seq) != redundant.end()) return false;
    auto cached = pool_.cache(m.seq, keep);
    CALSERVE_INVARIANT(cached.ok(), "kv cache: " + (cached ? std::string() : cached.error().what()));
    (void)device_.tell(da_kv_keep{m.seq, keep, device_generation_}, id());
    copied_into_.erase(m.seq);  // its KV is the cache's now
    for (auto r : redundant) end_kv(r, kv_end::evicted);
    return true;
}

void kv_manager_actor::on_reserve(kv_reserve& m) {
    if (!fits_context(std::max(m.tokens, m.full_tokens), 0, pool_.capacity_tokens())) {
        m.reply(kv_grant{m.seq, make_error(status::context_overflow, "sequence larger than the whole KV cache")});
        return;
    }
    if (pool_.holds(m.seq)) {
        m.reply(kv_grant{m.seq, make_error(status::sequence_exists, "sequence already holds KV")});
        return;
    }
    if (waiters_.empty() && try_grant(m)) return;
    if (waiters_.size() >= k_kv_wait_queue) {
        m.reply(kv_grant{m.seq, make_error(status::queue_full, "KV wait queue full")});
        return;
    }
    auto delay = m.deadline - rt().now();
    auto seq = m.seq;
    // The expiry comes back as a message so it is traced like any other input.
    auto timer = start_timer(delay, [this, seq] { (void)enqueue(kv_wait_expired{seq}, id()); });
    bool front = m.front;
    if (front) {
        // Behind earlier preempted sequences, ahead of every new admission.
        auto it = std::find_if(waiters_.begin(), waiters_.end(), [](const waiter& w) { return !w.request.front; });
        waiters_.insert(it, waiter{std::move(m), timer});
        serve_waiters();
    } else {
        waiters_.push_back(waiter{std::move(m), timer});
    }
}

void kv_manager_actor::on_grow(kv_grow& m) {
    if (m.preempt != 0) {
        if (cache_.running(m.preempt)) cache_.erase(m.preempt);  // its KV goes to the grower
        prompt_traces_.erase(m.preempt);
        end_kv(m.preempt, kv_end::released);
    }
    if (pool_.holds(m.seq) && !pool_.try_grow(m.seq, m.tokens))
        (void)make_room(pool_.blocks_for(m.tokens) - pool_.reserved_tokens(m.seq) / pool_.block_tokens(), 0);
    void_result outcome = make_error(status::kv_full, "no free KV block to grow sequence " + std::to_string(m.seq));
    if (auto plan = pool_.try_grow(m.seq, m.tokens)) outcome = pool_.commit_grow(*plan);
    else if (!pool_.holds(m.seq)) outcome = make_error(status::unknown_sequence, "sequence " + std::to_string(m.seq));
    m.reply(kv_grant{m.seq, outcome});
    serve_waiters();
}

void kv_manager_actor::on_extend(const kv_extend& m) {
    auto r = pool_.extend(m.seq, m.length);
    CALSERVE_INVARIANT(r.ok(), "kv_extend: " + r.error().what());
}

void kv_manager_actor::on_release(const kv_release& m) {
    // A release may overtake nothing: a sequence still waiting is simply dropped.
    for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
        if (it->request.seq == m.seq) {
            it->timer.cancel();
            it->request.reply(kv_grant{m.seq, make_error(status::cancelled, "released while waiting")});
            waiters_.erase(it);
            break;
        }
    }
    prompt_traces_.erase(m.seq);
    // A running entry is kept (promoted) with the valid KV, or ends with its sequence.
    const bool kept = cache_on_release(m);
    if (!kept && cache_.running(m.seq)) cache_.erase(m.seq);
    if (!kept && pool_.holds(m.seq)) end_kv(m.seq, m.granted ? kv_end::released : kv_end::returned);
    serve_waiters();
}

void kv_manager_actor::on_drop(const kv_drop_cache& m) {
    if (m.generation) device_generation_ = *m.generation;
    for (auto seq : cache_.clear()) end_kv(seq, m.free_on_device ? kv_end::dropped_on_device : kv_end::device_lost);
    serve_waiters();
}

void kv_manager_actor::on_share(const kv_share& m) {
    // Only a sequence that still holds its blocks (not cached: it is running) and is not
    // indexed yet; a released one's release came first and its KV is gone or kept.
    if (!cache_options_.enabled || !m.tokens || !pool_.holds(m.seq) || pool_.is_cached(m.seq) ||
        cache_.contains(m.seq))
        return;
    const std::int64_t block = cache_.block_tokens();
    const std::int64_t whole = std::int64_t(m.tokens->size()) / block * block;
    if (whole == 0) return;
    prefix_cache::lookup_trace trace;
    if (auto k = prompt_traces_.find(m.seq); k != prompt_traces_.end()) {
        trace = std::move(k->second);
        prompt_traces_.erase(k);
    }
    auto freed = cache_.insert(m.seq, m.scope, m.tokens, std::size_t(whole), /*running=*/true, &trace);
    for (auto r : freed)
        if (r != m.seq) end_kv(r, kv_end::evicted);  // r == m.seq: an equal entry exists, nothing to add
}

void kv_manager_actor::on_expired(const kv_wait_expired& m) {
    for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
        if (it->request.seq == m.seq) {
            it->request.reply(kv_grant{m.seq, make_error(status::kv_full, "no KV room before the deadline")});
            waiters_.erase(it);
            return;
        }
    }
}

void kv_manager_actor::serve_waiters() {
    while (!waiters_.empty() && try_grant(waiters_.front().request)) {
        waiters_.front().timer.cancel();
        waiters_.pop_front();
    }
}

void kv_manager_actor::publish() {
    if (!metrics_) return;
    metrics_->kv_blocks_used.set(double(pool_.used_blocks()));
    metrics_->kv_blocks_capacity.set(double(pool_.total_blocks()));
    if (cache_options_.enabled) metrics_->prefix_cache_blocks.set(double(pool_.cached_blocks()));
}

}  // namespace calserve::actors
