// Oracle for sampler/stdalgo.py: libstdc++'s real std::sort / std::partial_sort on (float key, int id) pairs.
// stdin (binary, repeated): int32 op, int32 n, int32 k, n float32 keys.
//   op 0: std::sort, comp a.key > b.key     op 1: std::sort, comp a.key < b.key
//   op 2: std::partial_sort(first, first+k, last), comp >     op 3: the same with <
//   op 4: no sort; writes n float32 keys built by McIlroy's antiqsort adversary against std::sort with <
//         (input keys ignored): inputs that drive introsort to its depth limit and heapsort fallback
//   op 16..19: ops 0..3 timed: each run 20 times on fresh copies; writes one uint64, the mean nanoseconds
// stdout (binary): the n ids in the order the algorithm leaves them (int32), per case (op 4: the n keys).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

struct E { float key; int32_t id; };

// M. D. McIlroy, "A Killer Adversary for Quicksort" (1999): values are fixed lazily as comparisons demand.
static std::vector<int32_t> adversary(int32_t n) {
    std::vector<int32_t> val(n, n - 1), ptr(n);
    const int32_t gas = n - 1;
    int32_t nsolid = 0, candidate = 0;
    for (int32_t i = 0; i < n; i++) ptr[i] = i;
    auto cmp = [&](int32_t x, int32_t y) {
        if (val[x] == gas && val[y] == gas) {
            if (x == candidate) val[x] = nsolid++;
            else val[y] = nsolid++;
        }
        if (val[x] == gas) candidate = x;
        else if (val[y] == gas) candidate = y;
        return val[x] < val[y];
    };
    std::sort(ptr.begin(), ptr.end(), cmp);
    return val;
}

int main() {
    int32_t hdr[3];
    std::vector<E> v;
    std::vector<float> keys;
    std::vector<int32_t> out;
    while (fread(hdr, sizeof hdr, 1, stdin) == 1) {
        const int32_t op = hdr[0], n = hdr[1], k = hdr[2];
        keys.resize(n);
        if (n && fread(keys.data(), sizeof(float), n, stdin) != (size_t)n) return 2;
        if (op == 4) {
            std::vector<int32_t> val = adversary(n);
            for (int32_t i = 0; i < n; i++) keys[i] = (float)val[i];
            fwrite(keys.data(), sizeof(float), n, stdout);
            continue;
        }
        v.resize(n);
        auto gt = [](const E& a, const E& b) { return a.key > b.key; };
        auto lt = [](const E& a, const E& b) { return a.key < b.key; };
        const int reps = op >= 16 ? 20 : 1;
        uint64_t ns = 0;
        for (int r = 0; r < reps; r++) {
            for (int32_t i = 0; i < n; i++) v[i] = {keys[i], i};
            auto t0 = std::chrono::steady_clock::now();
            switch (op & 15) {
                case 0: std::sort(v.begin(), v.end(), gt); break;
                case 1: std::sort(v.begin(), v.end(), lt); break;
                case 2: std::partial_sort(v.begin(), v.begin() + k, v.end(), gt); break;
                case 3: std::partial_sort(v.begin(), v.begin() + k, v.end(), lt); break;
                default: return 3;
            }
            auto t1 = std::chrono::steady_clock::now();
            ns += (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
        }
        if (op >= 16) {
            ns /= reps;
            fwrite(&ns, sizeof ns, 1, stdout);
            continue;
        }
        out.resize(n);
        for (int32_t i = 0; i < n; i++) out[i] = v[i].id;
        fwrite(out.data(), sizeof(int32_t), n, stdout);
    }
    return 0;
}
