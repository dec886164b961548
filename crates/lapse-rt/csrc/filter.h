/* filter.h - the record-time filters' decisions (filter.c says what they
 * are), inline in the probes that make them: a probe left out costs no
 * call into the runtime beyond its own. Included by probe.c and
 * trampoline.c (built there for the general registers only). */
#ifndef LAPSE_FILTER_H
#define LAPSE_FILTER_H

#include "rt.h"

#define INLINE static inline __attribute__((always_inline, no_instrument_function))

/* The range flags of fn: 0 when no range holds it. */
INLINE uint32_t filter_lookup(uintptr_t fn)
{
    const struct lapse_filter *f = &g_filter;
    if (fn < f->lo || fn >= f->hi)
        return 0;
    uint32_t a = 0, b = f->n;
    while (a < b) {
        uint32_t m = (a + b) / 2;
        const struct lapse_filter_range *r = &f->ranges[m];
        if (fn < r->start)
            b = m;
        else if (fn >= r->end)
            a = m + 1;
        else
            return r->flags;
    }
    return 0;
}

/* Forgets the frames whose place lies below `sp` (gone: a longjmp, an
 * exception through code without exit probes), and what was counted
 * deeper than them. */
INLINE void filter_drop_below(struct lapse_tls *t, uintptr_t sp)
{
    uint32_t n = t->fdepth;
    while (n && t->fstack[n - 1].sp < sp)
        n--;
    if (n != t->fdepth)
        t->fover = 0;
    t->fdepth = n;
    if (t->fbeyond && t->fbeyond_sp < sp)
        t->fbeyond = 0;
}

/* The frames that count: with --depth every kept one, else the matches. */
INLINE int filter_counts(const struct lapse_filter *f, uint32_t flags)
{
    return f->depth || (flags & LAPSE_FILTER_MATCH);
}

INLINE int lapse_filter_enter(struct lapse_tls *t, uintptr_t fn, uintptr_t sp)
{
    const struct lapse_filter *f = &g_filter;
    uint32_t flags = filter_lookup(fn);
    if (flags & LAPSE_FILTER_EXCLUDE)
        return 0;
    if (!f->stacked)
        return 1; /* --exclude alone */
    filter_drop_below(t, sp);
    if (t->fbeyond) {
        t->fbeyond++; /* deeper still */
        return 0;
    }
    uint32_t n = t->fdepth;
    if (f->only && n == 0 && t->fover == 0 && !(flags & LAPSE_FILTER_MATCH))
        return 0; /* outside every match */
    if (f->depth && n >= f->depth) {
        t->fbeyond = 1; /* too deep: this frame and all below it */
        t->fbeyond_sp = sp;
        return 0;
    }
    if (filter_counts(f, flags)) {
        if (n < LAPSE_FILTER_MAX_DEPTH) {
            t->fstack[n].sp = sp;
            t->fstack[n].fn = fn;
            t->fdepth = n + 1;
        } else {
            t->fover++; /* (matches nested deeper than the stack holds) */
        }
    }
    return 1;
}

/* An exit is matched to its entry by function, innermost first, not by
 * place: -finstrument-functions' exit probe may run with another stack
 * pointer than its entry probe (the prologue's pushes in between). */
INLINE int lapse_filter_exit(struct lapse_tls *t, uintptr_t fn, uintptr_t sp)
{
    (void)sp;
    const struct lapse_filter *f = &g_filter;
    uint32_t flags = filter_lookup(fn);
    if (flags & LAPSE_FILTER_EXCLUDE)
        return 0;
    if (!f->stacked)
        return 1;
    if (t->fbeyond) {
        t->fbeyond--; /* a frame too deep returns */
        return 0;
    }
    if (!filter_counts(f, flags))
        return t->fdepth > 0 || t->fover > 0; /* --filter: kept inside a match */
    if (t->fover) {
        t->fover--;
        return 1;
    }
    for (uint32_t i = t->fdepth; i-- > 0;) {
        if (t->fstack[i].fn == fn) {
            t->fdepth = i; /* (frames above it were gone) */
            return 1;
        }
    }
    return 0; /* its entry was not kept */
}

INLINE void lapse_filter_unwind(struct lapse_tls *t, uintptr_t sp)
{
    if (g_filter.stacked)
        filter_drop_below(t, sp);
}

#undef INLINE

#endif
