// Oracle for sampler/rng.py: libstdc++'s std::mt19937 and distributions, driven by commands on stdin.
//   u32 SEED N            N outputs of std::mt19937(SEED)
//   canon SEED N          N generate_canonical<double,53>
//   canonf SEED N         N generate_canonical<float,24>
//   urd SEED N A B        N uniform_real_distribution<double>(A,B)        (A, B as hex floats)
//   urf SEED N A B        N uniform_real_distribution<float>(A,B)
//   disc SEED D W w1..wW  D draws of discrete_distribution<int> over float weights (hex), then one raw output
//   canonv N K u1..uK     N generate_canonical<double,53> from a replayed sequence of K u32 values (N*2 <= K)
//   canonfv N K u1..uK    the same for generate_canonical<float,24>
// Each command prints one line of space-separated results (floats as %a).
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <vector>

struct Replay {  // a URBG that returns given 32-bit values in order
    using result_type = std::uint32_t;
    std::vector<std::uint32_t> v; size_t i = 0;
    static constexpr result_type min() { return 0; }
    static constexpr result_type max() { return 0xFFFFFFFFu; }
    result_type operator()() { return v[i++]; }
};

int main() {
    std::string cmd;
    while (std::cin >> cmd) {
        unsigned long seed; long n;
        std::cin >> seed >> n;
        std::mt19937 g((std::mt19937::result_type)seed);
        if (cmd == "u32") {
            for (long i = 0; i < n; i++) printf("%lu ", (unsigned long)g());
        } else if (cmd == "canon") {
            for (long i = 0; i < n; i++) printf("%a ", std::generate_canonical<double, 53>(g));
        } else if (cmd == "canonf") {
            for (long i = 0; i < n; i++) printf("%a ", (double)std::generate_canonical<float, 24>(g));
        } else if (cmd == "urd" || cmd == "urf") {
            std::string sa, sb; std::cin >> sa >> sb;
            double a = strtod(sa.c_str(), nullptr), b = strtod(sb.c_str(), nullptr);
            if (cmd == "urd") {
                std::uniform_real_distribution<double> d(a, b);
                for (long i = 0; i < n; i++) printf("%a ", d(g));
            } else {
                std::uniform_real_distribution<float> d((float)a, (float)b);
                for (long i = 0; i < n; i++) printf("%a ", (double)d(g));
            }
        } else if (cmd == "disc") {
            long w; std::cin >> w;
            std::vector<float> ws(w);
            for (long i = 0; i < w; i++) { std::string s; std::cin >> s; ws[i] = strtof(s.c_str(), nullptr); }
            std::discrete_distribution<int> d(ws.begin(), ws.end());
            for (long i = 0; i < n; i++) printf("%d ", d(g));
            printf("%lu ", (unsigned long)g());
        } else if (cmd == "canonv" || cmd == "canonfv") {
            // here the first number is the draw count and the second the value count
            Replay r; long draws = (long)seed, k = n; r.v.resize(k);
            for (long i = 0; i < k; i++) { unsigned long x; std::cin >> x; r.v[i] = (std::uint32_t)x; }
            for (long i = 0; i < draws; i++) {
                if (cmd == "canonv") printf("%a ", std::generate_canonical<double, 53>(r));
                else printf("%a ", (double)std::generate_canonical<float, 24>(r));
            }
        } else {
            fprintf(stderr, "unknown command %s\n", cmd.c_str());
            return 2;
        }
        printf("\n");
    }
    return 0;
}
