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
