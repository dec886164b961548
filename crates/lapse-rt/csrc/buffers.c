/* buffers.c - a thread's buffers: taking one (an arena buffer, else a
 * private one), handing it over once every slot it handed out is written
 * (else parking it until the next hand-over, see rt.h), and the flushes at
 * exit, exec, fork and crashes. The slow path that drives them, and thread
 * set-up, are in threads.c. Runs with signals blocked (the slow path's). */
#define _GNU_SOURCE
#include "rt.h"

#include <sys/mman.h>

/* A private buffer for t: one of its mappings that no parked buffer uses. */
NOINSTR int lapse_take_private(struct lapse_tls *t, struct lapse_buf *b)
{
    for (int k = 0; k < LAPSE_PARKED + 1; k++) {
        if (!t->own_map[k]) {
            void *m = mmap(NULL, 2 * BUF_BYTES, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (m == MAP_FAILED)
                return -1;
            t->own_map[k] = m;
        }
        struct lapse_event *base =
            (struct lapse_event *)(((uintptr_t)t->own_map[k] + BUF_BYTES - 1) &
                                   ~(uintptr_t)(BUF_BYTES - 1));
        int in_use = 0;
        for (uint32_t i = 0; i < t->nparked; i++)
            in_use |= t->parked[i].base == base;
        if (in_use)
            continue;
        b->base = base;
        b->arena = -1;
        b->claimed = lapse_ticks();
        return 0;
    }
    return -1;
}

/* Makes b thread t's filling buffer: an arena buffer if one can be had, else
 * a private one. -1 when there is no memory for either. */
NOINSTR int lapse_take_buffer(struct lapse_tls *t)
{
    struct lapse_buf *b = &t->fill;
    *b = (struct lapse_buf){0};
    b->first = t->next;
    if (lapse_arena_claim(t, b) == 0) {
        /* Here, in the hand-over's time rather than the probes': fault in the
         * pages of a buffer never used before (one store per page; what it
         * overwrites is left from the buffer's last use), and take back for
         * writing the lines the recorder read on its core. (The stores wait
         * for their lines one page after the other: 0.45 us a buffer, so
         * only at a buffer's first use.) */
        int fault = lapse_arena_first_use(b->owner, b->arena);
        for (char *p = (char *)b->base; p < (char *)(b->base + BUF_USABLE); p += 64) {
            if (fault && ((uintptr_t)p & 4095) == 0)
                *(volatile uint64_t *)p = *(volatile uint64_t *)p; /* (faults the page in) */
#if defined(__x86_64__)
            __asm__ volatile("prefetchw (%0)" ::"r"(p));
#else
            __builtin_prefetch(p, 1, 3);
#endif
        }
    } else if (lapse_take_private(t, b) != 0) {
        *b = (struct lapse_buf){0};
        return -1;
    }
    t->cur = b->base;
    t->deadline = lapse_ticks() + g_flush_ticks;
    return 0;
}

/* Hands b's first `count` slots over. Unless they are known to be written,
 * the holes (slots whose probe never wrote them) get fn 0 first. */
NOINSTR void lapse_hand_over(struct lapse_tls *t, struct lapse_buf *b, uint32_t count,
                              int all_written)
{
    for (uint32_t i = all_written ? count : lapse_written_prefix(b, count); i < count; i++)
        if (!lapse_slot_written(b, &b->base[i]))
            b->base[i].fn = LAPSE_HOLE_FN;
    if (count == 0) {
        lapse_arena_release(b);
    } else if (b->arena >= 0) {
        lapse_arena_note_delivery(t, count + b->leaves, lapse_arena_hand_over(t, b, count));
    } else {
        struct lapse_msg m =
            lapse_msg_events(g_pid, t->tid, b->first, t->stalled, count, t->discard);
        int rc = lapse_send_msg(&m, b->base, count * sizeof(struct lapse_event));
        lapse_arena_note_delivery(t, count + b->leaves, rc != SEND_LOST && rc != SEND_TIMEOUT);
    }
    *b = (struct lapse_buf){0};
}

/* The parked buffers whose slots are all written now go, oldest first; with
 * `all`, every one goes (holes marked); with `room`, at least the oldest
 * (so that one more fits). */
NOINSTR static void hand_over_parked(struct lapse_tls *t, int all, int room)
{
    while (t->nparked) {
        struct lapse_buf *p = &t->parked[0];
        int written = lapse_written_prefix(p, p->count) == p->count;
        if (!written && !all && !room)
            return;
        lapse_hand_over(t, p, p->count, written);
        for (uint32_t i = 1; i < t->nparked; i++)
            t->parked[i - 1] = t->parked[i];
        t->parked[--t->nparked] = (struct lapse_buf){0};
        room = 0;
    }
}

NOINSTR int lapse_is_parked_slot(const struct lapse_tls *t, const struct lapse_event *e)
{
    for (uint32_t i = 0; i < t->nparked; i++) {
        const struct lapse_buf *b = &t->parked[i];
        if (b->base && e >= b->base && e < b->base + BUF_USABLE && !lapse_slot_written(b, e))
            return 1;
    }
    return 0;
}

/* The leaf slots of f's first `count`, for a hand-over that came while a
 * leaf exit was being written into one (rt.h: lapse_leaf_exit): that slot
 * is sealed first unless the exit is in it already, so that it stays as
 * counted here. */
NOINSTR static uint32_t leaves_under_merge(struct lapse_tls *t, struct lapse_buf *f,
                                           uint32_t count)
{
    struct lapse_event *m = t->merging;
    t->merging = NULL;
    if (m < f->base || m >= f->base + count)
        return f->leaves;
    if (!(m->sp & LAPSE_LEAF_BIT))
        m->sp |= LAPSE_SEAL_BIT;
    uint32_t n = 0;
    for (uint32_t i = 0; i < count; i++) {
        const struct lapse_event *e = &f->base[i];
        n += e->fn >= LAPSE_MARK_LIMIT && (e->sp & LAPSE_LEAF_BIT) && !(e->stamp & 1) &&
             lapse_slot_written(f, e);
    }
    return n;
}

/* The filling buffer stops filling: the parked ones (older) go first, then
 * this one, unless a slot of it (or of an older one) is still being written:
 * then it is parked after them. */
NOINSTR static void retire_fill(struct lapse_tls *t)
{
    struct lapse_buf *f = &t->fill;
    uint32_t count = lapse_claimed_count(f, t->cur);
    t->cur = NULL;
    t->deadline = 0;
    hand_over_parked(t, 0, 0);
    if (!f->base) {
        t->next += t->skipped;
        t->skipped = 0;
        return;
    }
    /* the next buffer's numbering leaves a gap for events lost meanwhile
     * (events, not slots: a leaf call's slot holds two) */
    if (t->merging)
        f->leaves = leaves_under_merge(t, f, count);
    t->next = f->first + count + f->leaves + t->skipped;
    t->skipped = 0;
    if (!t->nparked && lapse_written_prefix(f, count) == count) {
        lapse_hand_over(t, f, count, 1);
    } else {
        if (t->nparked == LAPSE_PARKED)
            hand_over_parked(t, 0, 1);
        f->count = count;
        t->parked[t->nparked++] = *f;
        *f = (struct lapse_buf){0};
    }
}

NOINSTR void lapse_flush_final(struct lapse_tls *t)
{
    lapse_flush_own(t, 0);
    hand_over_parked(t, 1, 0);
}

NOINSTR void lapse_flush_own(struct lapse_tls *t, int refill)
{
    if (t->state != LAPSE_T_ACTIVE)
        return;
    uint64_t t0 = lapse_ticks();
    retire_fill(t);
    if (refill && lapse_take_buffer(t) != 0)
        t->state = LAPSE_T_OFF; /* no memory: this thread is no longer recorded */
    /* The wait for the socket is lapse's doing, not the program's: counted
     * here and taken out of the thread's timeline by the recorder. */
    t->stalled += lapse_ticks() - t0;
}

/* Every thread's buffer, at exit, exec or a crash. Other threads may still be
 * running: what they wrote is sent as a copy without resetting anything, and
 * the event index in the header lets the recorder drop what it gets twice. */
NOINSTR void lapse_flush_all(void)
{
    struct lapse_tls *self = &lapse_t;
    for (int i = 0; i < LAPSE_MAX_THREADS; i++) {
        struct lapse_tls *t = __atomic_load_n(&g_threads[i], __ATOMIC_ACQUIRE);
        if (!t || t == self)
            continue;
        struct lapse_buf b;
        b.base = __atomic_load_n(&t->fill.base, __ATOMIC_ACQUIRE);
        b.first = __atomic_load_n(&t->fill.first, __ATOMIC_ACQUIRE);
        b.claimed = __atomic_load_n(&t->fill.claimed, __ATOMIC_ACQUIRE);
        struct lapse_event *cur = __atomic_load_n(&t->cur, __ATOMIC_ACQUIRE);
        if (!b.base || cur <= b.base || cur > b.base + LAPSE_BUF_EVENTS)
            continue;
        uint32_t n = lapse_written_prefix(&b, lapse_claimed_count(&b, cur));
        if (n) {
            struct lapse_msg m = lapse_msg_events(g_pid, t->tid, b.first, t->stalled, n, 0);
            /* A recorder too far behind to take one copy will not take the
             * next ones either: the others go without theirs (lost, and
             * counted), instead of each waiting for it in turn while the
             * process should be ending. */
            if (lapse_send_msg(&m, b.base, n * sizeof(struct lapse_event)) == SEND_TIMEOUT)
                break;
        }
    }
    sigset_t old;
    lapse_block(&old);
    self->in_slow++;
    if (self->state == LAPSE_T_ACTIVE)
        lapse_flush_final(self);
    lapse_arena_settle();
    self->in_slow--;
    lapse_unblock(&old);
}

/* Before fork: the calling thread's buffers are handed over (the arena is
 * the parent's) and it fills a private buffer, which fork copies, until the
 * after-fork handlers run. */
NOINSTR void lapse_fork_prepare(struct lapse_tls *t)
{
    if (t->state != LAPSE_T_ACTIVE)
        return;
    lapse_flush_final(t);
    if (lapse_take_buffer(t) != 0) /* (g_forking: private) */
        t->state = LAPSE_T_OFF;
}

/* After fork (both sides): leave the private buffer for the arena again, so
 * a process killed soon after has its events where the recorder finds them. */
NOINSTR void lapse_back_to_arena(struct lapse_tls *t)
{
    if (t->state != LAPSE_T_ACTIVE || t->fill.arena >= 0 || !g_arena)
        return;
    lapse_flush_own(t, 1);
}
