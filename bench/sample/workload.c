/* CPU-bound workload for the sampling benchmark: a 60/30/10 split between
 * three functions. Prints its own run time (wall and CPU, user + system, in
 * ms) so the recorder's start-up and finishing are not counted as target
 * slowdown, and so that CPU time shows the cost of sampling even when other
 * work on the machine makes wall time noisy. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#define NOINLINE __attribute__((noipa))
#define LOOP(n) uint64_t x = n; for (uint64_t i = 0; i < (n); i++) x = x * 6364136223846793005ULL + i; return x
volatile uint64_t sink;
NOINLINE uint64_t work_a(uint64_t n) { LOOP(n); }
NOINLINE uint64_t work_b(uint64_t n) { LOOP(n); }
NOINLINE uint64_t work_c(uint64_t n) { LOOP(n); }
static double cpu_ms(void) {
    struct rusage ru; getrusage(RUSAGE_SELF, &ru);
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3
         + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}
static double now_ms(void) {
    struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
int main(int argc, char **argv) {
    uint64_t rounds = argc > 1 ? strtoull(argv[1], 0, 10) : 300;
    double t0 = now_ms(), c0 = cpu_ms();
    for (uint64_t r = 0; r < rounds; r++) {
        sink += work_a(6000000);
        sink += work_b(3000000);
        sink += work_c(1000000);
    }
    fprintf(stderr, "workload_ms %.1f cpu_ms %.1f\n", now_ms() - t0, cpu_ms() - c0);
    return 0;
}
