// sampler/_kernels_sort.h: llama_token_data's layout and the sorts of src/llama-sampler.cpp (0c1e57098) on it,
// with libstdc++'s own std::sort / std::partial_sort and llama.cpp's comparator.  Included by _kernels.cpp only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace ck {

struct TokenData {  // llama_token_data (include/llama.h)
    int32_t id;
    float logit;
    float p;
};
static_assert(sizeof(TokenData) == 12, "the layout of llama_token_data");

// the comparator of llama_token_data_array_partial_sort / _inplace (llama-sampler.cpp:136, :194)
struct Greater {
    bool operator()(const TokenData &a, const TokenData &b) const { return a.logit > b.logit; }
};

// The generator a drawing stage hands to libstdc++'s distributions: a std::mt19937 living in C (the engine of a
// sampler._kernels.Mt19937 object, as llama.cpp's samplers own one), or, without one, a replay of 32-bit outputs
// drawn in Python from std::mt19937's twin (sampler.rng.Mt19937).  Either way the distribution sees the same outputs.
struct Replay {
    using result_type = uint32_t;
    const uint32_t *v;
    int n, i;
    std::mt19937 *eng = nullptr;
    static constexpr result_type min() { return 0; }
    static constexpr result_type max() { return 0xFFFFFFFFu; }
    result_type operator()() { return eng ? (result_type)(*eng)() : i < n ? v[i++] : 0u; }
};

// ---------------------------------------------------------------------------------------------------------------
// sorts

// std::partial_sort(d, d + k, d + n, Greater) for the first k (the tail [k, n) is left unspecified).
//
// libstdc++'s __heap_select makes a heap of the first k, then lets element i in only when it beats the heap's top,
// whose value is the k-th largest value seen so far; an element that does not get in touches nothing.  So the
// first k of a partial_sort over {the first k} + {every later element that gets in} are the same records in the
// same order.  A float min-heap shadows the heap's values to find those elements in one pass; NaN logits among
// the first k (where the shadow's order would break) take the plain partial_sort.
// A binary min-heap of floats (no NaN): replace its minimum by v, sift down, return the new minimum.  Only the
// heap's minimum is ever read, so its layout need not be libstdc++'s.
static inline float replace_min(float *h, size_t k, float v) {
    // the heap is padded to an even size with +inf (see top_select), so both children exist whenever the left one
    // does, and the child is chosen without a branch (a mispredicted branch per level costs more than the heap)
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= k) break;
        c += h[c + 1] < h[c];
        if (!(h[c] < v)) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
    return h[0];
}

// Returns whether any logit is NaN.
template <class Get>
static bool top_select(size_t n, size_t k, Get get, TokenData *out, const float *contiguous = nullptr) {
    if (k == 0) return false;
    std::vector<TokenData> buf;
    buf.reserve(std::min(n, k * 8 + 64));
    std::vector<float> shadow;
    shadow.reserve(k + 1);
    bool nan_head = false;
    for (size_t i = 0; i < k; ++i) {
        TokenData t = get(i);
        buf.push_back(t);
        shadow.push_back(t.logit);
        nan_head |= t.logit != t.logit;
    }
    bool nan_seen = nan_head;
    if (nan_head) {
        for (size_t i = k; i < n; ++i) buf.push_back(get(i));
    } else {
        std::make_heap(shadow.begin(), shadow.end(), std::greater<float>());
        shadow.push_back(INFINITY);  // the padding replace_min reads (never moves up: nothing is above +inf)
        float low = shadow.front();
        auto visit = [&](size_t i) {
            const TokenData t = get(i);
            nan_seen |= t.logit != t.logit;
            if (t.logit > low) {
                buf.push_back(t);
                low = replace_min(shadow.data(), k, t.logit);
            }
        };
        size_t i = k;
#ifdef __SSE2__
        // contiguous logits: skip 16 at a time while none beats the heap's top (an ordered compare: NaN never
        // does) and note NaN (an unordered self-compare); SSE2 is part of x86-64 itself
        if (const float *lp = contiguous) {
            for (; i + 16 <= n; i += 16) {
                const __m128 a = _mm_loadu_ps(lp + i), b = _mm_loadu_ps(lp + i + 4);
                const __m128 c = _mm_loadu_ps(lp + i + 8), d = _mm_loadu_ps(lp + i + 12);
                const __m128 thr = _mm_set1_ps(low);
                const __m128 gt = _mm_or_ps(_mm_or_ps(_mm_cmpgt_ps(a, thr), _mm_cmpgt_ps(b, thr)),
                                            _mm_or_ps(_mm_cmpgt_ps(c, thr), _mm_cmpgt_ps(d, thr)));
                const __m128 un = _mm_or_ps(_mm_or_ps(_mm_cmpunord_ps(a, a), _mm_cmpunord_ps(b, b)),
                                            _mm_or_ps(_mm_cmpunord_ps(c, c), _mm_cmpunord_ps(d, d)));
                nan_seen |= _mm_movemask_ps(un) != 0;
                if (_mm_movemask_ps(gt) != 0) {
                    // visit only the elements above the top when the chunk started (in order: the top only
                    // rises, so none of the others can get in)
                    unsigned m = (unsigned)_mm_movemask_ps(_mm_cmpgt_ps(a, thr)) |
                                 ((unsigned)_mm_movemask_ps(_mm_cmpgt_ps(b, thr)) << 4) |
                                 ((unsigned)_mm_movemask_ps(_mm_cmpgt_ps(c, thr)) << 8) |
                                 ((unsigned)_mm_movemask_ps(_mm_cmpgt_ps(d, thr)) << 12);
                    while (m) {
                        visit(i + (size_t)__builtin_ctz(m));
                        m &= m - 1;
                    }
                }
            }
        }
#endif
        for (; i < n; ++i) visit(i);
    }
    std::partial_sort(buf.begin(), buf.begin() + k, buf.end(), Greater());
    std::memcpy(out, buf.data(), k * sizeof(TokenData));
    return nan_seen;
}

// as llama_token_data_array_partial_sort (llama-sampler.cpp:135): the 128-bucket pre-pass into res
static void bucket_partial_sort(const TokenData *data, size_t size, int npartial, std::vector<TokenData> &res) {
    constexpr int nbuckets = 128;
    constexpr float bucket_low = -10.0f;
    constexpr float bucket_high = 10.0f;
    constexpr float bucket_scale = nbuckets / (bucket_high - bucket_low);
    constexpr float bucket_inter = -bucket_low * bucket_scale;
    std::vector<int> bidx(size);
    int histo[nbuckets] = {0};
    for (size_t i = 0; i < size; ++i) {
        const float v = bucket_scale * data[i].logit + bucket_inter;
        // int(float) as x86's cvttss2si: truncation, INT_MIN for NaN and out-of-range values
        int ib = (std::fabs(v) < 2147483648.0f) ? int(v) : INT32_MIN;
        ib = std::max(0, std::min(nbuckets - 1, ib));
        bidx[i] = ib;
        ++histo[ib];
    }
    int nhave = 0;
    int ib = nbuckets - 1;
    for (; ib >= 0; --ib) {
        nhave += histo[ib];
        if (nhave >= npartial) break;
    }
    res.resize(nhave);
    TokenData *ptrs[nbuckets];
    TokenData *ptr = res.data();
    for (int j = nbuckets - 1; j >= ib && j >= 0; --j) {
        ptrs[j] = ptr;
        ptr += histo[j];
    }
    for (size_t i = 0; i < size; ++i) {
        const int j = bidx[i];
        if (j >= ib) *ptrs[j]++ = data[i];
    }
    ptr = res.data();
    int ndone = 0;
    for (int j = nbuckets - 1; j > ib; --j) {
        std::sort(ptr, ptr + histo[j], Greater());
        ptr += histo[j];
        ndone += histo[j];
    }
    if (ib >= 0) std::partial_sort(ptr, ptr + (npartial - ndone), ptr + histo[ib], Greater());
}

// as llama_token_data_array_partial_sort_inplace (llama-sampler.cpp:193); returns the new size
static size_t partial_sort_inplace(TokenData *d, size_t size, int npartial) {
    if (npartial <= 128) {
        if (size >= 256 && (size_t)npartial * 4 < size) {
            top_select(size, (size_t)npartial, [d](size_t i) { return d[i]; }, d);
        } else {
            std::partial_sort(d, d + npartial, d + size, Greater());
        }
        return (size_t)npartial;
    }
    std::vector<TokenData> tmp;
    bucket_partial_sort(d, size, npartial, tmp);
    std::copy(tmp.data(), tmp.data() + npartial, d);
    return (size_t)npartial;
}


}  // namespace ck
