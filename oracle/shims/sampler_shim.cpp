// Oracle helpers for the sampler tests, compiled by oracle/cxx.py (g++, libstdc++, nlohmann/json from the sdist).
//
// - probs_*: llama-server's get_token_probabilities (tools/server/server-common.cpp) on a logits array: the same
//   std::partial_sort with the same comparator over llama_token_data, expf, a float sum in array order.
// - json_get: nlohmann::json's get<T>() of a JSON text, or the exception text it throws.
// - to_string_*: std::to_string, as llama-server formats numbers in its messages.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {
struct token_data {
    int32_t id;
    float logit;
    float p;
};

void put(const std::string & s, char * out, int cap) {
    std::snprintf(out, (size_t) cap, "%s", s.c_str());
}
}  // namespace

extern "C" {

// writes all n entries (ids, p) in the order llama-server leaves them
void probs_run(const float * logits, int n, long long n_top_signed, int32_t * ids, float * ps) {
    std::vector<token_data> cur(n);
    for (int i = 0; i < n; i++) {
        cur[i] = token_data{i, logits[i], 0.0f};
    }
    size_t n_top = (size_t) n_top_signed;
    if (n_top > cur.size()) {
        n_top = cur.size();
    }
    if (n_top > 0) {
        std::partial_sort(cur.begin(), cur.begin() + n_top, cur.end(),
                          [](const token_data & a, const token_data & b) { return a.logit > b.logit; });
    }
    float max_l = -std::numeric_limits<float>::infinity();
    if (n_top > 0) {
        max_l = cur[0].logit;
    } else {
        for (const auto & t : cur) {
            max_l = std::max(max_l, t.logit);
        }
    }
    float cum_sum = 0.0f;
    for (auto & t : cur) {
        float p = expf(t.logit - max_l);
        t.p = p;
        cum_sum += p;
    }
    for (auto & t : cur) {
        t.p /= cum_sum;
    }
    for (int i = 0; i < n; i++) {
        ids[i] = cur[i].id;
        ps[i] = cur[i].p;
    }
}

// kind: 0 int32, 1 uint32, 2 float, 3 bool, 4 int64, 5 vector<string> (size)
int json_get(const char * text, int kind, char * out, int cap) {
    try {
        nlohmann::json j = nlohmann::json::parse(text);
        char buf[128];
        switch (kind) {
            case 0: std::snprintf(buf, sizeof buf, "%d", j.get<int32_t>()); break;
            case 1: std::snprintf(buf, sizeof buf, "%u", j.get<uint32_t>()); break;
            case 2: { float f = j.get<float>(); uint32_t u; std::memcpy(&u, &f, 4); std::snprintf(buf, sizeof buf, "f%08x", u); } break;
            case 3: std::snprintf(buf, sizeof buf, "%d", (int) j.get<bool>()); break;
            case 4: std::snprintf(buf, sizeof buf, "%lld", (long long) j.get<int64_t>()); break;
            default: std::snprintf(buf, sizeof buf, "%zu", j.get<std::vector<std::string>>().size()); break;
        }
        put(buf, out, cap);
        return 0;
    } catch (const std::exception & e) {
        put(e.what(), out, cap);
        return 1;
    }
}

void to_string_f(float v, char * out, int cap) { put(std::to_string(v), out, cap); }
void to_string_i(int32_t v, char * out, int cap) { put(std::to_string(v), out, cap); }

// std::sort / std::partial_sort of {i, keys[i]} with llama.cpp's comparator (logit >); k < 0: full std::sort
void sort_tokens(const float * keys, int n, int k, int32_t * out) {
    std::vector<token_data> v(n);
    for (int i = 0; i < n; i++) {
        v[i] = token_data{i, keys[i], 0.0f};
    }
    auto comp = [](const token_data & a, const token_data & b) { return a.logit > b.logit; };
    if (k < 0) {
        std::sort(v.begin(), v.end(), comp);
    } else {
        std::partial_sort(v.begin(), v.begin() + k, v.end(), comp);
    }
    for (int i = 0; i < n; i++) {
        out[i] = v[i].id;
    }
}

float c_strtof(const char * s, int * parsed) {
    char * end = nullptr;
    float v = std::strtof(s, &end);
    *parsed = end != s;
    return v;
}

}  // extern "C"
