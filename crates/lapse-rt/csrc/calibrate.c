/* calibrate.c - how much a probe costs on this machine, now: the cost the
 * analysis subtracts from every interval between two probes.
 *
 * Enter/exit pairs go through the exported probe symbols (called through
 * pointers, as an instrumented function's call would) in many short trials;
 * each trial's hand-over time is left out (the recorder removes that from
 * the timelines itself). A busy machine inflates some trials - a preemption,
 * a sibling hyperthread, another VM - and never deflates one, so the cost
 * is a low quantile of the trials (the 10th percentile), not their median:
 * one long round of 2,000 pairs measured 34-84 ns on a loaded machine
 * against 11 ns when quiet. A probe reads the tick counter once, so the
 * cost is never taken below one tick-counter read. The spread of the trials
 * (90th over 10th percentile) goes to the recorder, which says when it is
 * too wide to trust. The events go to the recorder marked discard. */
#include "rt.h"

#define NOINSTR __attribute__((no_instrument_function))

#define CAL_TRIALS 301
#define CAL_PAIRS 64

/* Sorts `v` (n values) in place: a shell sort, no allocation. */
NOINSTR static void sort_u64(uint64_t *v, int n)
{
    for (int gap = n / 2; gap > 0; gap /= 2)
        for (int i = gap; i < n; i++) {
            uint64_t x = v[i];
            int j = i;
            for (; j >= gap && v[j - gap] > x; j -= gap)
                v[j] = v[j - gap];
            v[j] = x;
        }
}

/* The cost of one tick-counter read (ticks x 1024), the 10th percentile of
 * trials of back-to-back reads. */
NOINSTR static uint64_t tick_read_cost(void)
{
    uint64_t per_read[CAL_TRIALS];
    for (int r = 0; r < CAL_TRIALS; r++) {
        uint64_t t0 = lapse_ticks(), last = t0;
        for (int i = 0; i < CAL_PAIRS; i++)
            last = lapse_ticks();
        per_read[r] = ((last - t0) * 1024) / CAL_PAIRS;
    }
    sort_u64(per_read, CAL_TRIALS);
    return per_read[CAL_TRIALS / 10];
}

uint64_t lapse_probe_spread;

NOINSTR uint64_t lapse_measure_probe_cost(void)
{
    void (*volatile enter)(void *, void *) = __cyg_profile_func_enter;
    void (*volatile leave)(void *, void *) = __cyg_profile_func_exit;
    void *fn = (void *)lapse_measure_probe_cost;
    uint64_t per_probe[CAL_TRIALS];
    lapse_t.discard = 1;
    for (int r = 0; r < CAL_TRIALS; r++) {
        uint64_t stalled0 = lapse_t.stalled;
        uint64_t t0 = lapse_ticks();
        for (int i = 0; i < CAL_PAIRS; i++) {
            enter(fn, fn);
            leave(fn, fn);
        }
        uint64_t t1 = lapse_ticks();
        uint64_t stalled = lapse_t.stalled - stalled0;
        uint64_t busy = (t1 - t0) > stalled ? (t1 - t0) - stalled : 0;
        per_probe[r] = (busy * 1024) / (2 * CAL_PAIRS);
    }
    sort_u64(per_probe, CAL_TRIALS);
    uint64_t low = per_probe[CAL_TRIALS / 10];
    uint64_t high = per_probe[CAL_TRIALS - 1 - CAL_TRIALS / 10];
    uint64_t floor = tick_read_cost();
    if (low < floor)
        low = floor;
    lapse_probe_spread = low ? (uint32_t)((high * 100) / low) : 0;
    return low;
}
