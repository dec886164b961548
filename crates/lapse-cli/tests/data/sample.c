/* The program behind sample.lapse (see README.md): -O2 without frame
 * pointers, a 3:1 split between two functions, one inlined helper, and a
 * function in a shared library (libsamplelib.so, from samplelib.c). */
#include <stdint.h>
#include <stdlib.h>
#define NOINLINE __attribute__((noipa))
volatile uint64_t sink;
uint64_t lib_spin(uint64_t n);
static inline uint64_t step(uint64_t x, uint64_t i) { return x * 6364136223846793005ULL + i; }
NOINLINE uint64_t hot(uint64_t n) { uint64_t x = n; for (uint64_t i = 0; i < n; i++) x = step(x, i); return x; }
NOINLINE uint64_t cold(uint64_t n) { uint64_t x = n; for (uint64_t i = 0; i < n; i++) x = x * 2862933555777941757ULL + i; return x; }
NOINLINE uint64_t driver(uint64_t u) { return hot(3 * u) + cold(u); }
int main(int argc, char **argv) {
    uint64_t u = argc > 1 ? strtoull(argv[1], 0, 10) : 1000000;
    for (int i = 0; i < 40; i++) sink += driver(u);
    sink += lib_spin(20 * u);
    return 0;
}
