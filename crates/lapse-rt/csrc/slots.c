/* slots.c - what a buffer's slots hold: how many its thread claimed, and
 * how many of those, from the first, are written. Plain functions of a
 * buffer (no state of the runtime), so that a test builds them alone
 * (crates/lapse-rt/tests/slots.rs). */
#include "rt.h"

/* Slots of b that its thread claimed, from its cursor (for the filling buffer). */
NOINSTR uint32_t lapse_claimed_count(const struct lapse_buf *b, const struct lapse_event *cur)
{
    if (!b->base || cur <= b->base)
        return 0;
    size_t n = (size_t)(cur - b->base);
    return (uint32_t)(n < BUF_USABLE ? n : BUF_USABLE);
}

/* Leading slots of b (of `count`) that hold events: a slot stamped before the
 * buffer was taken is left from its last use (or zero), not written yet. */
NOINSTR uint32_t lapse_written_prefix(const struct lapse_buf *b, uint32_t count)
{
    const volatile struct lapse_event *e = b->base;
    uint64_t since = b->claimed << 1;
    /* Nearly always every slot is written: the oldest stamp says so, found
     * without a branch, four slots at a time (a full buffer 1.1-1.3 us ->
     * 0.8 us on the 2-core VM, where what is left is bringing the buffer's
     * lines in from L2; this runs in every hand-over). Only a buffer with a
     * hole is looked at slot by slot. */
    uint64_t lo0 = UINT64_MAX, lo1 = UINT64_MAX, lo2 = UINT64_MAX, lo3 = UINT64_MAX;
    const volatile struct lapse_event *p = e, *end4 = e + (count & ~3u), *end = e + count;
    for (; p < end4; p += 4) {
        uint64_t s0 = p[0].stamp, s1 = p[1].stamp, s2 = p[2].stamp, s3 = p[3].stamp;
        lo0 = s0 < lo0 ? s0 : lo0;
        lo1 = s1 < lo1 ? s1 : lo1;
        lo2 = s2 < lo2 ? s2 : lo2;
        lo3 = s3 < lo3 ? s3 : lo3;
    }
    for (; p < end; p++) {
        uint64_t s0 = p->stamp;
        lo0 = s0 < lo0 ? s0 : lo0;
    }
    if (lo0 >= since && lo1 >= since && lo2 >= since && lo3 >= since)
        return count;
    uint32_t i = 0;
    while (i < count && e[i].stamp >= since)
        i++;
    return i;
}
