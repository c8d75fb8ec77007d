// Token buckets: the rules' rate limits, the workers' new-connection cap and error-reply budget.
#pragma once

#include <algorithm>
#include <cstdint>

namespace sluice {

// A rate as the lcores apply it. Each worker admits rate / workers connections per second, since a rule's (or a
// source's) flows spread over the workers.
struct RateLimit {
    double tokens_per_tsc = 0;  // 0: not limited
    double burst = 0;
    bool per_source = false;
};

struct TokenBucket {
    double tokens;
    uint64_t last_tsc;
};

// Takes a token from the bucket, refilled first for the time since its last use; false when none is left.
// Fast-path safe; the caller owns the bucket (a worker's own, or its lcore slot's).
inline bool take_token(TokenBucket& bucket, const RateLimit& limit, uint64_t now_tsc) {
    bucket.tokens =
        std::min(limit.burst, bucket.tokens + static_cast<double>(now_tsc - bucket.last_tsc) * limit.tokens_per_tsc);
    bucket.last_tsc = now_tsc;
    if (bucket.tokens < 1.0) return false;
    bucket.tokens -= 1.0;
    return true;
}

// Whether the bucket would be full by now: forgetting it then changes nothing (a new one starts full).
inline bool refilled(const TokenBucket& bucket, const RateLimit& limit, uint64_t now_tsc) {
    return bucket.tokens + static_cast<double>(now_tsc - bucket.last_tsc) * limit.tokens_per_tsc >= limit.burst;
}

}  // namespace sluice
