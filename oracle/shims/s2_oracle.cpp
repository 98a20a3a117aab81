// Oracle for sampler/s2.py: the s2 sampler's sample_token written from the reference steps, with libstdc++'s real
// std::sort, std::mt19937 and std::discrete_distribution (and glibc's expf through std::exp(float)).
// stdin (binary), repeated cases:
//   int32 n, uint32 seed, int32 draws, float temperature, float top_p, int32 top_k, int32 sets, sets*n float32
// One std::mt19937(seed) per case; draw i uses logit set i % sets.
// stdout (binary) per case: draws int32 ids, uint32 the generator's next output, uint64 nanoseconds of the draws.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

struct Params { float temperature; float top_p; int32_t top_k; };
struct Item { float logit; int32_t id; };

static int32_t sample_token(const float* logits, int32_t n, const Params& params, std::mt19937& rng) {
    if (n <= 0) return 0;                                                    // 1
    std::vector<Item> items(n);                                              // 2
    for (int32_t i = 0; i < n; i++) items[i] = {logits[i], i};
    std::sort(items.begin(), items.end(),                                    // 3
              [](const Item& a, const Item& b) { return a.logit > b.logit; });
    const int32_t k = params.top_k > 0 ? std::min(params.top_k, n) : n;     // 4
    const float top_p = std::min(std::max(params.top_p, 0.0f), 1.0f);
    std::vector<float> probs(n);                                             // 5
    const float max_logit = items[0].logit;
    float sum = 0.0f;
    for (int32_t i = 0; i < n; i++) {
        probs[i] = std::exp(items[i].logit - max_logit);
        sum += probs[i];
    }
    if (sum > 0.0f)
        for (int32_t i = 0; i < n; i++) probs[i] /= sum;
    std::vector<int32_t> kept;                                               // 6
    float cumsum = 0.0f;
    for (int32_t i = 0; i < n; i++) {
        cumsum += probs[i];
        if (i >= k) continue;
        if (i > 0 && cumsum > top_p) continue;
        kept.push_back(i);
    }
    if (kept.empty()) kept.push_back(0);                                     // 7
    if (params.temperature <= 0.0f) return items[kept[0]].id;                // 8
    std::vector<float> w(kept.size());                                       // 9
    float kmax = items[kept[0]].logit;
    for (int32_t j : kept) kmax = std::max(kmax, items[j].logit);
    float s = 0.0f;
    for (size_t j = 0; j < kept.size(); j++) {
        w[j] = std::exp((items[kept[j]].logit - kmax) / params.temperature);
        s += w[j];
    }
    if (s > 0.0f)
        for (float& x : w) x /= s;
    float s2 = 0.0f;                                                         // 10
    for (float x : w) s2 += x;
    if (!(s2 > 0.0f)) return items[kept[0]].id;
    for (float& x : w) x /= s2;
    std::discrete_distribution<int32_t> dist(w.begin(), w.end());            // 11
    return items[kept[dist(rng)]].id;
}

int main() {
    struct { int32_t n; uint32_t seed; int32_t draws; float temperature; float top_p; int32_t top_k; int32_t sets; } h;
    std::vector<float> logits;
    std::vector<int32_t> out;
    while (fread(&h, sizeof h, 1, stdin) == 1) {
        logits.resize((size_t)h.n * h.sets);
        if (!logits.empty() && fread(logits.data(), sizeof(float), logits.size(), stdin) != logits.size()) return 2;
        std::mt19937 rng(h.seed);
        const Params params{h.temperature, h.top_p, h.top_k};
        out.resize(h.draws);
        auto t0 = std::chrono::steady_clock::now();
        for (int32_t i = 0; i < h.draws; i++)
            out[i] = sample_token(logits.data() + (size_t)(i % h.sets) * h.n, h.n, params, rng);
        auto t1 = std::chrono::steady_clock::now();
        uint32_t next = rng();
        uint64_t ns = (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
        fwrite(out.data(), sizeof(int32_t), out.size(), stdout);
        fwrite(&next, sizeof next, 1, stdout);
        fwrite(&ns, sizeof ns, 1, stdout);
    }
    return 0;
}
