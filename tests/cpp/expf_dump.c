/* Writes glibc's expf(x) for every float32 bit pattern in [LO, HI) (hex arguments), as raw float32 on stdout. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    uint64_t lo = strtoull(argv[1], NULL, 16), hi = strtoull(argv[2], NULL, 16);
    static float buf[1 << 16];
    size_t k = 0;
    for (uint64_t b = lo; b < hi; b++) {
        uint32_t u = (uint32_t)b; float x; memcpy(&x, &u, 4);
        buf[k++] = expf(x);
        if (k == sizeof buf / sizeof *buf) { fwrite(buf, 4, k, stdout); k = 0; }
    }
    fwrite(buf, 4, k, stdout);
    return 0;
}
