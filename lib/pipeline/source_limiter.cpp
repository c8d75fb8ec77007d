#include "pipeline/source_limiter.hpp"

#include <stdexcept>

#include <rte_malloc.h>

#include "common/compiler.hpp"

namespace sluice {

SourceLimiter::SourceLimiter(const std::string& name, int socket, const RateLimit& limit)
    : limit_(limit), overflow_{limit.burst, 0} {
    rte_hash_parameters params{};
    params.name = name.c_str();
    params.entries = kTableEntries;
    params.key_len = sizeof(Key);
    params.hash_func = key_hash;
    params.socket_id = socket;
    table_ = rte_hash_create(&params);
    if (!table_) throw std::runtime_error("cannot create per-source rate limit table " + name);
    buckets_ = static_cast<TokenBucket*>(
        rte_malloc_socket("sluice_source_buckets", sizeof(TokenBucket) * kTableEntries, 64, socket));
    if (!buckets_) {
        rte_hash_free(table_);
        throw std::runtime_error("out of memory for per-source rate limit table " + name);
    }
}

SourceLimiter::~SourceLimiter() {
    rte_hash_free(table_);
    rte_free(buckets_);
}

uint32_t SourceLimiter::key_hash(const void* data, uint32_t, uint32_t) {
    const Key& key = *static_cast<const Key*>(data);
    return keyed_source_hash(key.address, static_cast<IpFamily>(key.family));
}

uint32_t SourceLimiter::sources() const { return sources_; }

void SourceLimiter::expire(uint64_t now_tsc) {
    for (uint32_t i = 0; i < kExpirePerInsert && !ages_.empty(); ++i) {
        const uint32_t oldest = ages_.front();
        if (!refilled(buckets_[oldest], limit_, now_tsc)) return;
        void* key;
        rte_hash_get_key_with_position(table_, static_cast<int32_t>(oldest), &key);
        ages_.remove(oldest);
        rte_hash_del_key(table_, key);
        --sources_;
    }
}

bool SourceLimiter::take(const IpAddress& source, IpFamily family, uint64_t now_tsc, bool& overflowed) {
    overflowed = false;
    const Key key{sender_of(source, family), static_cast<uint32_t>(family), 0};
    const hash_sig_t hash = rte_hash_hash(table_, &key);
    int32_t position = rte_hash_lookup_with_hash(table_, &key, hash);
    if (position >= 0) {
        ages_.touch(static_cast<uint32_t>(position));
        return take_token(buckets_[position], limit_, now_tsc);
    }
    expire(now_tsc);
    if (SLUICE_LIKELY(sources_ < kCapacity)) position = rte_hash_add_key_with_hash(table_, &key, hash);
    if (SLUICE_UNLIKELY(position < 0)) {
        overflowed = true;
        return take_token(overflow_, limit_, now_tsc);
    }
    buckets_[position] = TokenBucket{limit_.burst, now_tsc};  // a new source starts full
    ages_.push_back(static_cast<uint32_t>(position));
    ++sources_;
    return take_token(buckets_[position], limit_, now_tsc);
}

}  // namespace sluice
