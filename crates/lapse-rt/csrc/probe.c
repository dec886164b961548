/* probe.c - the probe path: what every instrumented call pays.
 *
 * Why C: the per-thread buffer must live in initial-exec TLS so that reaching
 * it is one %fs-relative load. Stable Rust's thread_local! in a cdylib is
 * general-dynamic and goes through __tls_get_addr (a function call and a
 * lookup), which would double the probe's cost; C gives us the TLS model
 * attribute directly. Everything here is one xadd + rdtsc + two compares +
 * three stores (and a frame for the stack pointer), and async-signal-safe
 * (see lapse_claim and threads.c).
 *
 * Cost (measured by lapse_measure_probe_cost on the recording machine): one
 * rdtsc (20-40 cycles, the floor) plus about 8 instructions. No lock, no
 * allocation, no system call; the slow path runs once per 2560 events. */
#include "rt.h"

__thread struct lapse_tls lapse_t __attribute__((tls_model("initial-exec")));

#define EXPORT __attribute__((no_instrument_function, visibility("default")))

static inline __attribute__((always_inline, no_instrument_function)) void
lapse_probe(void *fn, uint64_t is_exit, uintptr_t sp)
{
    struct lapse_tls *t = &lapse_t;
    /* Claim the slot first, in one instruction: a signal handler that fires
     * before the write gets the slots after this one, never this one. */
    struct lapse_event *e = lapse_claim(t);
    uint64_t now = lapse_ticks();
    /* past the end (the slot's address says so), or the buffer has waited
     * long enough (events reach the recorder within ~100 ms even from a
     * thread that calls little), or the thread is not set up (deadline 0) */
    if (__builtin_expect(lapse_in_guard(e) || now > t->deadline, 0)) {
        lapse_slow_path(t, e, fn, is_exit, now, sp);
        return;
    }
    e->fn = (uint64_t)fn;
    e->stamp = (now << 1) | is_exit;
    e->sp = sp;
}

/* The stack pointer of the instrumented function at its probe call: the
 * probe's own canonical frame address. */
#define CALLER_SP() ((uintptr_t)__builtin_dwarf_cfa())

EXPORT void __cyg_profile_func_enter(void *fn, void *call_site)
{
    (void)call_site;
    lapse_probe(fn, 0, CALLER_SP());
}

EXPORT void __cyg_profile_func_exit(void *fn, void *call_site)
{
    (void)call_site;
    lapse_probe(fn, 1, CALLER_SP());
}

/* A marker event (lapse_rt.h: LAPSE_MARK_*), recorded like a probe. */
NOINSTR void lapse_mark(uint64_t mark, uintptr_t sp)
{
    lapse_probe((void *)mark, 0, sp);
}

/* Probe cost: time enter/exit pairs through the exported symbols (called via
 * pointers, as an instrumented function's PLT call would), less the time the
 * buffer hand-overs took (the recorder takes that out of the timelines
 * itself), and take the median over rounds. The events go to the recorder
 * marked discard. */
#define CAL_ROUNDS 15
#define CAL_PAIRS 2000

__attribute__((no_instrument_function)) uint64_t lapse_measure_probe_cost(void)
{
    void (*volatile enter)(void *, void *) = __cyg_profile_func_enter;
    void (*volatile leave)(void *, void *) = __cyg_profile_func_exit;
    void *fn = (void *)lapse_measure_probe_cost;
    uint64_t per_probe[CAL_ROUNDS];
    lapse_t.discard = 1;
    for (int r = 0; r < CAL_ROUNDS; r++) {
        uint64_t stalled0 = lapse_t.stalled;
        uint64_t t0 = lapse_ticks();
        for (int i = 0; i < CAL_PAIRS; i++) {
            enter(fn, fn);
            leave(fn, fn);
        }
        uint64_t t1 = lapse_ticks();
        /* hand-over time is removed from timelines separately: leave it out */
        uint64_t busy = (t1 - t0) - (lapse_t.stalled - stalled0);
        per_probe[r] = (busy * 1024) / (2 * CAL_PAIRS);
    }
    /* insertion sort; 15 values */
    for (int i = 1; i < CAL_ROUNDS; i++) {
        uint64_t v = per_probe[i];
        int j = i - 1;
        while (j >= 0 && per_probe[j] > v) {
            per_probe[j + 1] = per_probe[j];
            j--;
        }
        per_probe[j + 1] = v;
    }
    return per_probe[CAL_ROUNDS / 2];
}
