/* scope.c - the lapse crate's probes: `#[lapse::profile]` functions and
 * `lapse::scope!` blocks of Rust programs.
 *
 * The crate looks these two up with dlsym(RTLD_DEFAULT) once and calls them
 * through a pointer with the address of the site's record (a static in the
 * program's `lapse_sites` section, which the recorder reads to name it).
 * They record exactly what __cyg_profile_func_enter/_exit record: one
 * event through lapse_probe (rt.h), with the caller's stack pointer. The
 * guard's drop makes the exit, so a panic unwinding through the frame
 * records it as it goes: nothing here needs to know about unwinding.
 *
 * Cost: the probe's (probe.c) plus the crate's indirect call. No lock, no
 * allocation, no system call; async-signal-safe as the probe is. */
#include "rt.h"
#include "filter.h"

#define EXPORT __attribute__((no_instrument_function, visibility("default")))

/* The stack pointer of the function that holds the guard at its probe
 * call: this function's canonical frame address. */
#define CALLER_SP() ((uintptr_t)__builtin_dwarf_cfa())

/* (record-time filters as in probe.c: the recorder put the sites of the
 * functions and scopes they name in the table) */
EXPORT void lapse_scope_enter(const void *site)
{
    if (__builtin_expect(g_filter.on, 0) &&
        !lapse_filter_enter(&lapse_t, (uintptr_t)site, CALLER_SP()))
        return;
    lapse_probe((void *)site, 0, CALLER_SP());
}

EXPORT void lapse_scope_exit(const void *site)
{
    if (__builtin_expect(g_filter.on, 0) &&
        (!lapse_filter_exit(&lapse_t, (uintptr_t)site, CALLER_SP()) ||
         (g_filter.min_ticks && lapse_min_time_exit(&lapse_t, (uintptr_t)site))))
        return;
    lapse_probe((void *)site, 1, CALLER_SP());
}
