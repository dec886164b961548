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
 * allocation, no system call; the slow path runs once per 2560 events.
 * Record-time filters (filter.h) add a load and a branch while off; a
 * probe they leave out costs a lookup instead (3-4 ns, filter.c). */
#include "rt.h"
#include "filter.h"

__thread struct lapse_tls lapse_t __attribute__((tls_model("initial-exec")));

#define EXPORT __attribute__((no_instrument_function, visibility("default")))

/* (lapse_probe, the probe itself, is in rt.h: scope.c records with it too) */

/* The stack pointer of the instrumented function at its probe call: the
 * probe's own canonical frame address. */
#define CALLER_SP() ((uintptr_t)__builtin_dwarf_cfa())

/* With record-time filters on (filter.c), the filter decides first: a probe
 * left out costs the lookup, not the clock read and the slot. Off, the
 * test is one load and a branch predicted not taken. */
EXPORT void __cyg_profile_func_enter(void *fn, void *call_site)
{
    (void)call_site;
    if (__builtin_expect(g_filter.on, 0) &&
        !lapse_filter_enter(&lapse_t, (uintptr_t)fn, CALLER_SP()))
        return;
    lapse_probe(fn, 0, CALLER_SP());
}

EXPORT void __cyg_profile_func_exit(void *fn, void *call_site)
{
    (void)call_site;
    if (__builtin_expect(g_filter.on, 0) &&
        (!lapse_filter_exit(&lapse_t, (uintptr_t)fn, CALLER_SP()) ||
         (g_filter.min_ticks && lapse_min_time_exit(&lapse_t, (uintptr_t)fn))))
        return;
    lapse_probe(fn, 1, CALLER_SP());
}

/* A marker event (lapse_rt.h: LAPSE_MARK_*), recorded like a probe. */
NOINSTR void lapse_mark(uint64_t mark, uintptr_t sp)
{
    if (mark == LAPSE_MARK_UNWIND && g_filter.on)
        lapse_filter_unwind(&lapse_t, sp);
    lapse_probe((void *)mark, 0, sp);
}
