/* Off-CPU benchmark workload: one thread that computes about 50 µs, then
 * sleeps about 50 µs, over and over: about 10,000 context switches a
 * second. Prints its own wall and CPU time (user + system: the kernel's
 * work at each switch, stack copies included, is charged to it) and how
 * many times it was switched out, so the recorder's start-up and finishing
 * are not counted. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#define NOINLINE __attribute__((noipa))
volatile uint64_t sink;
NOINLINE uint64_t compute(uint64_t n) {
    uint64_t x = n;
    for (uint64_t i = 0; i < n; i++) x = x * 6364136223846793005ULL + i;
    return x;
}
NOINLINE void pause_briefly(void) {
    struct timespec ts = {0, 50000};
    nanosleep(&ts, 0);
    sink++;
}
static double cpu_ms(struct rusage *ru) {
    getrusage(RUSAGE_SELF, ru);
    return (ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) * 1e3
         + (ru->ru_utime.tv_usec + ru->ru_stime.tv_usec) / 1e3;
}
static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
int main(int argc, char **argv) {
    uint64_t rounds = argc > 1 ? strtoull(argv[1], 0, 10) : 20000;
    uint64_t work = argc > 2 ? strtoull(argv[2], 0, 10) : 60000;
    prctl(PR_SET_TIMERSLACK, 1UL); /* sleep 50 µs, not 50 µs + the default 50 µs slack */
    struct rusage r0, r1;
    double t0 = now_ms(), c0 = cpu_ms(&r0);
    for (uint64_t r = 0; r < rounds; r++) {
        sink += compute(work);
        pause_briefly();
    }
    double wall = now_ms() - t0, cpu = cpu_ms(&r1) - c0;
    long switches = (r1.ru_nvcsw - r0.ru_nvcsw) + (r1.ru_nivcsw - r0.ru_nivcsw);
    fprintf(stderr, "switcher_ms %.1f cpu_ms %.1f switches %ld per_s %.0f\n", wall, cpu, switches,
            switches / (wall / 1e3));
    return 0;
}
