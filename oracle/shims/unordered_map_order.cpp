// Oracle for constrained/_stdhash.py: inserts length-prefixed keys (from stdin) into a std::unordered_map<std::string,
// int> one by one, as llama.cpp's vocabulary loader fills token_to_id, then prints the values in iteration order
// and the std::hash of every key.
#include <cstdint>
#include <cstdio>
#include <string>
#include <unordered_map>
#include <vector>

int main() {
    std::unordered_map<std::string, int> m;
    std::vector<std::string> keys;
    uint32_t len;
    while (std::fread(&len, 4, 1, stdin) == 1) {
        std::string s(len, '\0');
        if (len && std::fread(&s[0], 1, len, stdin) != len) return 1;
        m[s] = (int) keys.size();
        keys.push_back(s);
    }
    for (const auto & kv : m) std::printf("%d\n", kv.second);
    std::hash<std::string> h;
    for (const auto & k : keys) std::printf("%zu\n", h(k));
}
