/* demo.c - the program `lapse demo` records.
 *
 * A small "job runner" with a story a profile should tell at a glance:
 *   1. load_config()     sleeps 120 ms (waiting on "the disk"): elapsed time,
 *                        almost no application time;
 *   2. crunch_numbers()  150 ms of CPU in 20,000 calls of checksum_block():
 *                        application time ~= elapsed time, many small calls;
 *   3. walk_tree(11)     recursion, 4,095 calls, inclusive counted once;
 *   4. a background thread, background_indexer(), spins 100 ms while the main
 *      thread does steps 2-3.
 * Built by the lapse crate's build script with -finstrument-functions and
 * embedded in the binary. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* burn `ms` of this thread's CPU time */
NOINLINE uint64_t spin_ms(double ms)
{
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    double end = cpu_ms() + ms;
    while (cpu_ms() < end)
        for (int i = 0; i < 4096; i++)
            x ^= (x << 7) ^ (x >> 9);
    return x;
}

NOINLINE void load_config(void)
{
    struct timespec d = {0, 120 * 1000 * 1000};
    nanosleep(&d, NULL);
}

NOINLINE uint64_t checksum_block(uint64_t seed)
{
    uint64_t x = seed | 1;
    for (int i = 0; i < 64; i++)
        x ^= (x << 13) ^ (x >> 7) ^ (x << 17);
    return x;
}

NOINLINE uint64_t crunch_numbers(void)
{
    uint64_t sum = 0;
    double end = cpu_ms() + 150.0;
    uint64_t i = 0;
    while (cpu_ms() < end)
        for (int k = 0; k < 1000; k++)
            sum += checksum_block(i++);
    return sum;
}

NOINLINE uint64_t walk_tree(int depth)
{
    if (depth == 0)
        return checksum_block((uint64_t)depth);
    uint64_t l = walk_tree(depth - 1);
    uint64_t r = walk_tree(depth - 1);
    __asm__ volatile("" : "+r"(l), "+r"(r));
    return l + r;
}

static void *background_indexer(void *arg)
{
    *(uint64_t *)arg = spin_ms(100.0);
    return NULL;
}

int main(void)
{
    uint64_t indexed = 0, sum = 0;
    pthread_t t;
    load_config();
    int started = pthread_create(&t, NULL, background_indexer, &indexed) == 0;
    sum += crunch_numbers();
    sum += walk_tree(11);
    if (started)
        pthread_join(t, NULL);
    printf("demo: checksum %016llx\n", (unsigned long long)(sum ^ indexed));
    return 0;
}
