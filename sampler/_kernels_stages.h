// sampler/_kernels_stages.h: the sampler stages of src/llama-sampler.cpp (0c1e57098) on llama_token_data
// records, our own code written to the semantics of the function cited beside each.  Included by _kernels.cpp only.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "_kernels_sort.h"

namespace ck {

// a 1-D float array of any stride (bytes)
struct Floats {
    char *base;
    std::ptrdiff_t stride, n;
    float &operator[](size_t i) const { return *reinterpret_cast<float *>(base + (std::ptrdiff_t)i * stride); }
};

// ---------------------------------------------------------------------------------------------------------------
// the shared pieces of the samplers

struct Cur {  // llama_token_data_array
    TokenData *data;
    size_t size;
    bool sorted;
};

// as llama_sampler_softmax_impl (llama-sampler.cpp:293)
static void softmax_impl(Cur &c, bool do_sort) {
    if (do_sort && !c.sorted) {
        c.size = partial_sort_inplace(c.data, c.size, (int)c.size);
        c.sorted = true;
    }
    float max_l = c.data[0].logit;
    if (!c.sorted) {
        for (size_t i = 1; i < c.size; ++i) max_l = std::max(max_l, c.data[i].logit);
    }
    float cum_sum = 0.0f;
    for (size_t i = 0; i < c.size; ++i) {
        const float p = expf(c.data[i].logit - max_l);
        c.data[i].p = p;
        cum_sum += p;
    }
    for (size_t i = 0; i < c.size; ++i) c.data[i].p /= cum_sum;
}

// as llama_sampler_top_k_impl (llama-sampler.cpp:321)
static void top_k_impl(Cur &c, int32_t k) {
    if (k <= 0) return;
    k = std::min(k, (int)c.size);
    if (!c.sorted) {
        c.size = partial_sort_inplace(c.data, c.size, k);
        c.sorted = true;
    }
    c.size = (size_t)k;
}

// as llama_sampler_temp_impl (llama-sampler.cpp:265)
static void temp_impl(Cur &c, float temp) {
    if (c.size == 0) return;
    if (temp <= 0.0f) {
        size_t max_i = 0;
        float max_l = c.data[0].logit;
        for (size_t i = 1; i < c.size; ++i) {
            if (c.data[i].logit > max_l) {
                c.data[max_i].logit = -INFINITY;
                max_i = i;
                max_l = c.data[i].logit;
            } else {
                c.data[i].logit = -INFINITY;
            }
        }
        return;
    }
    for (size_t i = 0; i < c.size; ++i) c.data[i].logit /= temp;
}

// llama_sample_dist (llama-sampler.cpp:217): std::discrete_distribution<int> over p, drawing from the replay
static int sample_dist(const Cur &c, Replay &g) {
    std::vector<float> w(c.size);
    for (size_t i = 0; i < c.size; ++i) w[i] = c.data[i].p;
    std::discrete_distribution<int> dist(w.begin(), w.end());
    return dist(g);
}


// as llama_sampler_top_p_apply (llama-sampler.cpp:1549)
static void top_p_impl(Cur &c, float p, size_t min_keep) {
    if (p >= 1.0f) return;
    softmax_impl(c, false);
    size_t k = c.size;
    TokenData *pdata = c.data;
    std::vector<TokenData> buf_sort;
    if (!c.sorted && c.size > 1024) {
        k = std::min<size_t>(256, c.size);
        bucket_partial_sort(c.data, c.size, (int)k, buf_sort);
        pdata = buf_sort.data();
    } else if (!c.sorted) {
        c.size = partial_sort_inplace(c.data, c.size, (int)k);
        c.sorted = true;
    }
    float cum_sum = 0.0f;
    size_t last_idx = c.size;
    for (size_t i = 0; i < c.size; ++i) {
        cum_sum += pdata[i].p;
        if (cum_sum >= p && i + 1 >= min_keep) {
            last_idx = i + 1;
            break;
        }
        if (!c.sorted && i == k - 1) {
            k = c.size;
            bucket_partial_sort(c.data, c.size, (int)k, buf_sort);
            pdata = buf_sort.data();
        }
    }
    if (!c.sorted) {
        std::copy(buf_sort.data(), buf_sort.data() + last_idx, c.data);
        c.sorted = true;
    }
    c.size = last_idx;
}

// as llama_sampler_min_p_apply (llama-sampler.cpp:1749)
static void min_p_impl(Cur &c, float p, size_t min_keep) {
    if (p <= 0.0f || c.size == 0) return;
    const float lp = logf(p);
    bool applied = false;
    if (!c.sorted) {
        float max_logit = -FLT_MAX;
        for (size_t i = 0; i < c.size; ++i) max_logit = std::max(max_logit, c.data[i].logit);
        const float min_logit = max_logit + lp;
        std::vector<TokenData> kept;
        kept.reserve(c.size);
        for (size_t i = 0; i < c.size; ++i) {
            if (c.data[i].logit >= min_logit) kept.push_back(c.data[i]);
        }
        if (!kept.empty() && kept.size() >= min_keep) {
            std::copy(kept.begin(), kept.end(), c.data);
            c.size = kept.size();
            applied = true;
        }
    }
    if (!applied) {
        if (!c.sorted) {
            c.size = partial_sort_inplace(c.data, c.size, (int)c.size);
            c.sorted = true;
        }
        const float min_logit = c.data[0].logit + lp;
        size_t i = 1;
        for (; i < c.size; ++i) {
            if (c.data[i].logit < min_logit && i >= min_keep) break;
        }
        c.size = i;
    }
}

// as llama_sampler_typical_apply (llama-sampler.cpp:1910)
static void typical_impl(Cur &c, float p, size_t min_keep) {
    if (p >= 1.0f) return;
    softmax_impl(c, true);
    float entropy = 0.0f;
    for (size_t i = 0; i < c.size; ++i) entropy += -c.data[i].p * logf(c.data[i].p);
    std::vector<float> scores(c.size);
    for (size_t i = 0; i < c.size; ++i) scores[i] = fabsf(-logf(c.data[i].p) - entropy);
    std::vector<size_t> idx(c.size);
    std::iota(idx.begin(), idx.end(), 0);
    std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
    float cum_sum = 0.0f;
    size_t last_idx = idx.size();
    for (size_t i = 0; i < idx.size(); ++i) {
        cum_sum += c.data[idx[i]].p;
        if (cum_sum > p && (min_keep == 0 || i >= min_keep - 1)) {
            last_idx = i + 1;
            break;
        }
    }
    std::vector<TokenData> out(last_idx);
    for (size_t i = 0; i < last_idx; ++i) out[i] = c.data[idx[i]];
    std::copy(out.begin(), out.end(), c.data);
    c.size = last_idx;
    c.sorted = false;
}

// as llama_sampler_temp_ext_apply (llama-sampler.cpp:2133)
static void temp_ext_impl(Cur &c, float temp, float delta, float exponent) {
    if (!(delta > 0)) {
        temp_impl(c, temp);
        return;
    }
    const float min_temp = std::max(0.0f, temp - delta);
    const float max_temp = temp + delta;
    if (c.size <= 1) return;
    const float max_entropy = -logf(1.0f / c.size);
    softmax_impl(c, true);
    float entropy = 0.0f;
    for (size_t i = 0; i < c.size; ++i) {
        const float prob = c.data[i].p;
        if (prob > 0.0f) entropy -= prob * logf(prob);
    }
    const float normalized_entropy = entropy / max_entropy;
    const float dyn_temp = min_temp + (max_temp - min_temp) * powf(normalized_entropy, exponent);
    temp_impl(c, dyn_temp);
    const double max_l_double = c.data[0].logit;
    double cum_sum_double = 0.0;
    for (size_t i = 0; i < c.size; ++i) {
        const double pd = exp(c.data[i].logit - max_l_double);
        c.data[i].p = pd;
        cum_sum_double += pd;
    }
    for (size_t i = 0; i < c.size; ++i) c.data[i].p /= cum_sum_double;
}

// as llama_sample_xtc_apply (llama-sampler.cpp:2344) after its draw said "apply"; the records are shifted down by
// pos_last (C moves its data pointer instead)
static void xtc_impl(Cur &c, float thr, size_t min_keep) {
    softmax_impl(c, true);
    size_t pos_last = 0;
    for (size_t i = 0; i < c.size; ++i) {
        if (c.data[i].p >= thr) {
            pos_last = i;
        } else {
            break;
        }
    }
    if (c.size - pos_last >= min_keep && pos_last > 0) {
        std::memmove(c.data, c.data + pos_last, (c.size - pos_last) * sizeof(TokenData));
        c.size -= pos_last;
    }
}

// as llama_sampler_dist_apply (llama-sampler.cpp:1150) for size >= 1; g replays uniform_real_distribution<double>'s
// two draws
static size_t dist_impl(Cur &c, Replay &g) {
    std::uniform_real_distribution<double> dist(0.0f, 1.0f);
    if (c.size == 1) {
        (void)dist(g);
        c.data[0].p = 1.0f;
        return 0;
    }
    float max_l = c.data[0].logit;
    if (!c.sorted) {
        for (size_t i = 1; i < c.size; ++i) max_l = std::max(max_l, c.data[i].logit);
    }
    double sum_cum = 0.0f;
    for (size_t i = 0; i < c.size; ++i) {
        const float p = expf(c.data[i].logit - max_l);
        c.data[i].p = p;
        sum_cum += p;
    }
    const double rnd = dist(g);
    double sum_run = 0.0f;
    const double sum_tgt = sum_cum * rnd;
    bool found = false;
    size_t sel = 0;
    for (size_t i = 0; i < c.size; ++i) {
        if (!found) {
            sum_run += c.data[i].p;
            if (sum_run >= sum_tgt) {
                sel = i;
                found = true;
            }
        }
        c.data[i].p /= sum_cum;
    }
    return found ? sel : c.size - 1;
}

// as llama_sampler_adaptive_p_apply (llama-sampler.cpp:3750) for a target >= 0 and size >= 1: the probabilities
// before the transform go to orig (size floats), then the transform, the softmax and the draw (two generator
// outputs from two candidates up, none below); returns the selected index
static constexpr float AP_WIDTH_INV = 1.0f / 0.3f;  // INV_WIDTH = 1 / DISTRIBUTION_WIDTH
static constexpr float AP_PEAK = 5.0f;
static constexpr float AP_SHARP = 10.0f;

static int adaptive_p_impl(Cur &c, float target_in, float weighted_sum, float total_weight, float *orig, Replay &g) {
    softmax_impl(c, false);
    for (size_t i = 0; i < c.size; ++i) orig[i] = c.data[i].p;
    const float target = std::clamp(target_in, 0.0f, 1.0f);
    const float at =
        std::clamp(total_weight == 0.0f ? target : 2.0f * target - (weighted_sum / total_weight), 0.0f, 1.0f);
    for (size_t i = 0; i < c.size; ++i) {
        if (c.data[i].logit == -INFINITY) continue;
        const float dist = std::abs((c.data[i].p - at) * AP_WIDTH_INV);
        c.data[i].logit = AP_PEAK - AP_SHARP * dist * dist / (1.0f + dist);
    }
    softmax_impl(c, false);
    return sample_dist(c, g);
}

// ---------------------------------------------------------------------------------------------------------------
// top-n-sigma (llama-sampler.cpp:3237) on a float buffer

// The variance sum `float acc; acc += pow(l - mean, 2)` rounds twice per term: the double add, then the float.
// Within one float binade [lo, hi) of acc (ulp u) every term's effect is fixed: the double add rounds the term to
// the grid u * 2^-29 (acc is a multiple of u, so even on that grid), the float rounding then to the grid u, and
// only an exact half-ulp remainder (a tie, whose even neighbour depends on acc) depends on acc.  So a block whose
// terms have no tie and whose model sum a + u * sum(round(term)) stays below hi is that sum exactly (a term that
// would leave the binade makes the model reach hi too, by monotonicity); other blocks run the plain loop.
// pow(d, 2) of a float d promoted to double is d * d exactly (48 significant bits; glibc's pow is within 1 ulp).
static float nsigma_var_sum(const Floats &lg, size_t n, float mean) {
    constexpr size_t B = 128;
    float acc = 0.0f;
    size_t i = 0;
    const float *lp = lg.stride == 4 ? reinterpret_cast<const float *>(lg.base) : nullptr;
    while (i < n) {
        const size_t end = std::min(n, i + B);
        if (acc >= 0x1p-120f && acc <= FLT_MAX) {
            int e;
            (void)std::frexp(acc, &e);  // acc = f * 2^e, f in [0.5, 1): binade [2^(e-1), 2^e)
            const double a = acc;
            const double hi = std::ldexp(1.0, e);
            const double inv_u = std::ldexp(1.0, 24 - e);  // u = 2^(e-24)
            double tot = 0.0;
            bool bad = false;
#ifdef __SSE2__
            if (lp && end - i == B) {  // the same per term, two doubles at a time (the sum of integers is exact)
                const __m128 mean4 = _mm_set1_ps(mean), ninf4 = _mm_set1_ps(-INFINITY);
                const __m128d a2 = _mm_set1_pd(a), iu2 = _mm_set1_pd(inv_u), mg2 = _mm_set1_pd(0x1p52);
                const __m128d half2 = _mm_set1_pd(0.5), big2 = _mm_set1_pd(0x1p1000);
                const __m128d absmask = _mm_castsi128_pd(_mm_set1_epi64x(0x7FFFFFFFFFFFFFFFLL));
                __m128d t0 = _mm_setzero_pd(), t1 = _mm_setzero_pd(), badv = _mm_setzero_pd();
                for (size_t t = i; t < end; t += 4) {
                    const __m128 l4 = _mm_loadu_ps(lp + t);
                    const __m128 d4 = _mm_andnot_ps(_mm_cmpeq_ps(l4, ninf4), _mm_sub_ps(l4, mean4));  // -inf: 0
                    const __m128d dl = _mm_cvtps_pd(d4), dh = _mm_cvtps_pd(_mm_movehl_ps(d4, d4));
                    const __m128d ddl = _mm_mul_pd(dl, dl), ddh = _mm_mul_pd(dh, dh);
                    const __m128d xl = _mm_mul_pd(_mm_sub_pd(_mm_add_pd(a2, ddl), a2), iu2);
                    const __m128d xh = _mm_mul_pd(_mm_sub_pd(_mm_add_pd(a2, ddh), a2), iu2);
                    const __m128d rl = _mm_sub_pd(_mm_add_pd(xl, mg2), mg2), rh = _mm_sub_pd(_mm_add_pd(xh, mg2), mg2);
                    const __m128d fl = _mm_and_pd(_mm_sub_pd(xl, rl), absmask), fh = _mm_and_pd(_mm_sub_pd(xh, rh), absmask);
                    badv = _mm_or_pd(badv, _mm_or_pd(_mm_cmpeq_pd(fl, half2), _mm_cmpeq_pd(fh, half2)));
                    badv = _mm_or_pd(badv, _mm_or_pd(_mm_cmpnlt_pd(ddl, big2), _mm_cmpnlt_pd(ddh, big2)));
                    t0 = _mm_add_pd(t0, rl);
                    t1 = _mm_add_pd(t1, rh);
                }
                double lanes[2];
                _mm_storeu_pd(lanes, _mm_add_pd(t0, t1));
                tot = lanes[0] + lanes[1];
                bad = _mm_movemask_pd(badv) != 0;
            } else
#endif
            for (size_t t = i; t < end; ++t) {
                const float l = lg[t];
                const float d = l - mean;
                double dd = (double)d * (double)d;
                if (l == -INFINITY) dd = 0.0;
                const double r1 = (a + dd) - a;
                const double x = r1 * inv_u;
                const double rx = (x + 0x1p52) - 0x1p52;
                const double fr = x - rx;
                bad |= !(dd < 0x1p1000) || fr == 0.5 || fr == -0.5;
                tot += rx;
            }
            if (!bad) {
                const double s = a + tot / inv_u;
                if (s < hi) {
                    acc = (float)s;
                    i = end;
                    continue;
                }
            }
        }
        for (size_t t = i; t < end; ++t) {
            const float l = lg[t];
            if (l != -INFINITY) {
                const float d = l - mean;
                acc = (float)((double)acc + (double)d * (double)d);
            }
        }
        i = end;
    }
    return acc;
}

// as llama_sampler_top_n_sigma_apply (llama-sampler.cpp:3237) for n > 0 and size > 1: dst (may be src) gets src
// with every logit below max - n * std set to -inf (-inf logits left out of the statistics)
static void top_n_sigma_impl(const Floats &src, size_t n, float nsig, const Floats &dst) {
    float mx = src[0];
    float logits_sum = 0;
    size_t valid_count = 0;
    // branch-free: std::max(mx, -inf) is mx, and adding +0 for a -inf is adding nothing (the sum starts at +0 and
    // an exact cancellation gives +0, so it is never -0)
    for (size_t i = 0; i < n; ++i) {
        const float l = src[i];
        const bool ok = l != -INFINITY;
        mx = std::max(mx, l);
        logits_sum += ok ? l : 0.0f;
        valid_count += ok;
    }
    const float mean = valid_count > 0 ? logits_sum / valid_count : 0;
    const float acc = nsigma_var_sum(src, n, mean);
    const float sd = valid_count > 0 ? std::sqrt(acc / valid_count) : 0;
    const float thr = mx - (nsig * sd);
    size_t i = 0;
#ifdef __SSE2__
    if (src.stride == 4 && dst.stride == 4) {
        const float *sp = reinterpret_cast<const float *>(src.base);
        float *dp = reinterpret_cast<float *>(dst.base);
        const __m128 thr4 = _mm_set1_ps(thr), ninf4 = _mm_set1_ps(-INFINITY);
        for (; i + 4 <= n; i += 4) {
            const __m128 l4 = _mm_loadu_ps(sp + i);
            const __m128 m = _mm_cmplt_ps(l4, thr4);  // NaN: false, kept
            _mm_storeu_ps(dp + i, _mm_or_ps(_mm_and_ps(m, ninf4), _mm_andnot_ps(m, l4)));
        }
    }
#endif
    for (; i < n; ++i) {
        const float l = src[i];
        dst[i] = (l < thr) ? -INFINITY : l;
    }
}

}  // namespace ck
