/* tsc_pair.c - the floor for a probe pair: the cost of two TSC reads,
 * measured in the same run as the probes (SPEC 7). Prints ns per pair. */
#include <stdint.h>
#include <stdio.h>
#include <time.h>

static inline uint64_t ticks(void)
{
    uint32_t lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    return ((uint64_t)hi << 32) | lo;
}

int main(void)
{
    const long n = 20000000;
    uint64_t s = 0;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) {
        s += ticks();
        s ^= ticks();
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n;
    printf("%.3f\n", ns + (double)(s & 1) * 0.0);
    return 0;
}
