/* threads.c - per-thread buffers and the slow path: setting a thread up,
 * handing its buffer over (when full, or when LAPSE_FLUSH_TICKS have passed
 * since the last hand-over, so a quiet thread's events still arrive within
 * ~100 ms), and letting it go when the thread ends.
 *
 * Signal handlers run probes too. The slow path blocks every signal while it
 * runs, so a handler never sees a half-installed buffer; the probe claims its
 * slot with one instruction and finds the end of its buffer from the slot's
 * address (rt.h), so a handler between a probe's claim and its write cannot
 * make it write out of bounds. What a handler can still do there is fill and
 * hand over the buffer the interrupted probe is about to write into: so a
 * buffer is only handed over once every claimed slot holds an event stamped
 * after the buffer was taken, and is "parked" until then (struct lapse_tls). */
#define _GNU_SOURCE
#include "rt.h"

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>

struct lapse_tls *g_threads[LAPSE_MAX_THREADS];
static pthread_key_t g_key;

NOINSTR void lapse_block(void *old_mask)
{
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, (sigset_t *)old_mask);
}

NOINSTR void lapse_unblock(const void *old_mask)
{
    pthread_sigmask(SIG_SETMASK, (const sigset_t *)old_mask, NULL);
}

/* ---- buffers ---- */

/* Slots of b that its thread claimed, from its cursor (for the filling buffer). */
NOINSTR static uint32_t claimed_count(const struct lapse_buf *b, const struct lapse_event *cur)
{
    if (!b->base || cur <= b->base)
        return 0;
    size_t n = (size_t)(cur - b->base);
    return (uint32_t)(n < BUF_USABLE ? n : BUF_USABLE);
}

/* Leading slots of b (of `count`) that hold events: a slot stamped before the
 * buffer was taken is left from its last use (or zero), not written yet. */
NOINSTR static uint32_t written_prefix(const struct lapse_buf *b, uint32_t count)
{
    const volatile struct lapse_event *e = b->base;
    uint64_t since = b->claimed << 1;
    uint32_t i = 0;
    while (i < count && e[i].stamp >= since)
        i++;
    return i;
}

/* A private buffer for t: one of its two mappings that b (parked) does not use. */
NOINSTR static int take_private(struct lapse_tls *t, struct lapse_buf *b)
{
    for (int k = 0; k < 2; k++) {
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
        if (t->parked.base == base)
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
NOINSTR static int take_buffer(struct lapse_tls *t)
{
    struct lapse_buf *b = &t->fill;
    *b = (struct lapse_buf){0};
    b->first = t->next;
    if (lapse_arena_claim(t, b) == 0) {
        /* Here, in the hand-over's time rather than the probes': fault in the
         * pages of a buffer never used before (one store per page; what it
         * overwrites is left from the buffer's last use), and take back for
         * writing the lines the recorder read on its core. */
        for (char *p = (char *)b->base; p < (char *)(b->base + BUF_USABLE); p += 64) {
            if (((uintptr_t)p & 4095) == 0)
                *(volatile uint64_t *)(p + 8) = 0; /* a stamp: "not written" */
#if defined(__x86_64__)
            __asm__ volatile("prefetchw (%0)" ::"r"(p));
#else
            __builtin_prefetch(p, 1, 3);
#endif
        }
    } else if (take_private(t, b) != 0) {
        *b = (struct lapse_buf){0};
        return -1;
    }
    t->cur = b->base;
    t->deadline = lapse_ticks() + g_flush_ticks;
    return 0;
}

/* Hands b's first `count` slots over. Unless they are known to be written,
 * the holes (slots whose probe never wrote them) get fn 0 first. */
NOINSTR static void hand_over(struct lapse_tls *t, struct lapse_buf *b, uint32_t count,
                              int all_written)
{
    for (uint32_t i = all_written ? count : written_prefix(b, count); i < count; i++)
        if (b->base[i].stamp < (b->claimed << 1))
            b->base[i].fn = LAPSE_HOLE_FN;
    if (count == 0) {
        lapse_arena_release(b);
    } else if (b->arena >= 0) {
        lapse_arena_hand_over(t, b, count);
    } else {
        struct lapse_msg m =
            lapse_msg_events(g_pid, t->tid, b->first, t->stalled, count, t->discard);
        lapse_send_msg(&m, b->base, count * sizeof(struct lapse_event));
    }
    *b = (struct lapse_buf){0};
}

/* The filling buffer stops filling: the parked one (older) goes first, then
 * this one, unless a slot of it is still being written (then it is parked). */
NOINSTR static void retire_fill(struct lapse_tls *t)
{
    struct lapse_buf *f = &t->fill;
    uint32_t count = claimed_count(f, t->cur);
    t->cur = NULL;
    t->deadline = 0;
    if (t->parked.base)
        hand_over(t, &t->parked, t->parked.count, 0);
    if (!f->base) {
        t->next += t->skipped;
        t->skipped = 0;
        return;
    }
    /* the next buffer's numbering leaves a gap for events lost meanwhile */
    t->next = f->first + count + t->skipped;
    t->skipped = 0;
    if (written_prefix(f, count) == count) {
        hand_over(t, f, count, 1);
    } else {
        f->count = count;
        t->parked = *f;
        *f = (struct lapse_buf){0};
    }
}

NOINSTR void lapse_flush_final(struct lapse_tls *t)
{
    lapse_flush_own(t, 0);
    if (t->parked.base)
        hand_over(t, &t->parked, t->parked.count, 0);
}

NOINSTR void lapse_flush_own(struct lapse_tls *t, int refill)
{
    if (t->state != LAPSE_T_ACTIVE)
        return;
    uint64_t t0 = lapse_ticks();
    retire_fill(t);
    if (refill && take_buffer(t) != 0)
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
        uint32_t n = written_prefix(&b, claimed_count(&b, cur));
        if (n) {
            struct lapse_msg m = lapse_msg_events(g_pid, t->tid, b.first, t->stalled, n, 0);
            lapse_send_msg(&m, b.base, n * sizeof(struct lapse_event));
        }
    }
    sigset_t old;
    lapse_block(&old);
    self->in_slow++;
    if (self->state == LAPSE_T_ACTIVE)
        lapse_flush_final(self);
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
    if (take_buffer(t) != 0) /* (g_forking: private) */
        t->state = LAPSE_T_OFF;
}

/* After fork, in the child: the thread's private buffer starts empty, its
 * numbering from zero; the parent's other threads do not exist here. */
NOINSTR void lapse_fork_child(struct lapse_tls *t)
{
    for (int i = 0; i < LAPSE_MAX_THREADS; i++) {
        struct lapse_tls *o = g_threads[i];
        if (o && o != t)
            g_threads[i] = NULL; /* their memory stays: those threads are gone */
    }
    t->tid = lapse_gettid();
    t->next = 0;
    t->skipped = 0;
    t->stalled = 0;
    if (t->fill.base) {
        t->cur = t->fill.base;
        t->fill.first = 0;
        t->fill.claimed = lapse_ticks(); /* what the parent wrote there is not ours */
    }
}

/* After fork (both sides): leave the private buffer for the arena again, so
 * a process killed soon after has its events where the recorder finds them. */
NOINSTR void lapse_back_to_arena(struct lapse_tls *t)
{
    if (t->state != LAPSE_T_ACTIVE || t->fill.arena >= 0 || !g_arena)
        return;
    lapse_flush_own(t, 1);
}

/* ---- thread start and end ---- */

NOINSTR static void thread_done(void *arg)
{
    struct lapse_tls *t = arg;
    if (t != &lapse_t || t->state != LAPSE_T_ACTIVE)
        return;
    sigset_t old;
    lapse_block(&old);
    t->in_slow++;
    lapse_flush_own(t, 0);
    /* Later key destructors may still run instrumented code (which takes a
     * buffer again): stay armed for the rounds glibc allows, then let go. */
    if (++t->dtor_rounds < 3) {
        pthread_setspecific(g_key, t);
    } else {
        if (t->slot >= 0)
            __atomic_store_n(&g_threads[t->slot], NULL, __ATOMIC_RELEASE);
        if (t->parked.base)
            hand_over(t, &t->parked, t->parked.count, 0);
        t->state = LAPSE_T_OFF;
        for (int k = 0; k < 2; k++) {
            if (t->own_map[k])
                munmap(t->own_map[k], 2 * BUF_BYTES);
            t->own_map[k] = NULL;
        }
    }
    t->in_slow--;
    lapse_unblock(&old);
}

NOINSTR int lapse_threads_init(void)
{
    return pthread_key_create(&g_key, thread_done);
}

static unsigned g_slot_hint; /* where the search for a free registry slot starts */

/* Registers t for the flushes other threads do at exit, exec and crashes
 * (a thread beyond the registry's size is recorded all the same: it hands
 * its own buffers over, only a crash elsewhere can lose its last one). */
NOINSTR static void thread_register(struct lapse_tls *t)
{
    t->slot = -1;
    unsigned start = __atomic_load_n(&g_slot_hint, __ATOMIC_RELAXED);
    for (unsigned k = 0; k < LAPSE_MAX_THREADS; k++) {
        unsigned i = (start + k) % LAPSE_MAX_THREADS;
        struct lapse_tls *expected = NULL;
        if (__atomic_load_n(&g_threads[i], __ATOMIC_RELAXED) == NULL &&
            __atomic_compare_exchange_n(&g_threads[i], &expected, t, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED)) {
            t->slot = (int32_t)i;
            __atomic_store_n(&g_slot_hint, i + 1, __ATOMIC_RELAXED);
            return;
        }
    }
}

NOINSTR static int thread_setup(struct lapse_tls *t)
{
    t->next = t->first_next;
    t->skipped = 0;
    t->stalled = 0;
    t->tid = lapse_gettid();
    t->parked = (struct lapse_buf){0};
    t->state = LAPSE_T_ACTIVE;
    thread_register(t);
    if (take_buffer(t) != 0) {
        if (t->slot >= 0)
            __atomic_store_n(&g_threads[t->slot], NULL, __ATOMIC_RELEASE);
        t->state = LAPSE_T_OFF;
        return -1;
    }
    pthread_setspecific(g_key, t);
    return 0;
}

/* ---- probes before start-up ---- */

int g_ctor_done;

/* A probe before the runtime's constructor ran (from .preinit_array, or a
 * constructor that runs before it): the environment may not be readable
 * yet, so nothing is set up; the thread keeps its events in a private
 * buffer until start-up (3,840 of them; any more are counted as lost). */
NOINSTR static void early_setup(struct lapse_tls *t)
{
    t->tid = lapse_gettid();
    t->next = 0;
    t->fill = (struct lapse_buf){0};
    if (take_private(t, &t->fill) != 0) {
        t->state = LAPSE_T_OFF;
        return;
    }
    t->cur = t->fill.base;
    t->deadline = ~0ull; /* nothing can be handed over before start-up */
    t->state = LAPSE_T_EARLY;
}

NOINSTR void lapse_early_detach(struct lapse_tls *t, struct lapse_early *out)
{
    *out = (struct lapse_early){0};
    if (t->state != LAPSE_T_EARLY)
        return;
    out->buf = t->fill;
    out->count = claimed_count(&t->fill, t->cur);
    out->lost = t->skipped;
    for (int k = 0; k < 2; k++) {
        char *m = t->own_map[k];
        if (m && (char *)t->fill.base >= m && (char *)t->fill.base < m + 2 * BUF_BYTES) {
            out->map = m;
            t->own_map[k] = NULL; /* not to be reused before it is sent */
        }
    }
    t->fill = (struct lapse_buf){0};
    t->cur = NULL;
    t->deadline = 0;
    t->skipped = 0;
    t->state = LAPSE_T_NEW;
}

NOINSTR void lapse_early_send(struct lapse_tls *t, struct lapse_early *early)
{
    if (!early->buf.base)
        return;
    if (g_inited == 1 && early->count) {
        uint32_t ok = written_prefix(&early->buf, early->count);
        for (uint32_t i = ok; i < early->count; i++)
            if (early->buf.base[i].stamp < (early->buf.claimed << 1))
                early->buf.base[i].fn = LAPSE_HOLE_FN;
        struct lapse_msg m =
            lapse_msg_events(g_pid, lapse_gettid(), 0, 0, early->count, 0);
        lapse_send_msg(&m, early->buf.base, early->count * sizeof(struct lapse_event));
    }
    /* the thread's own events go on after these */
    t->first_next = early->count + early->lost;
    if (t->state == LAPSE_T_ACTIVE && !t->fill.base)
        t->next = t->first_next;
    if (early->map)
        munmap(early->map, 2 * BUF_BYTES);
    *early = (struct lapse_early){0};
}

/* ---- the slow path ---- */

/* e is a slot of b that this thread claimed and nobody wrote yet. */
NOINSTR static int is_open_slot(const struct lapse_buf *b, const struct lapse_event *e)
{
    return b->base && e >= b->base && e < b->base + BUF_USABLE && e->stamp < (b->claimed << 1);
}

NOINSTR void lapse_slow_path(struct lapse_tls *t, struct lapse_event *e, void *fn,
                             uint64_t is_exit, uint64_t now)
{
    if (t->state == LAPSE_T_OFF)
        return;
    sigset_t old;
    lapse_block(&old);
    uint64_t stamp = (now << 1) | is_exit;
    if (t->in_slow) {
        /* Re-entered (a fault inside the slow path, or calibration): record
         * into the current buffer if the slot is one, else count a loss. */
        if (is_open_slot(&t->fill, e)) {
            e->fn = (uint64_t)fn;
            e->stamp = stamp;
        } else if (t->state == LAPSE_T_ACTIVE) {
            t->skipped++;
        }
        lapse_unblock(&old);
        return;
    }
    t->in_slow = 1;
    if (t->state == LAPSE_T_EARLY && g_ctor_done) {
        /* start-up has been (another thread's early probes): hand them over */
        struct lapse_early early;
        lapse_early_detach(t, &early);
        lapse_early_send(t, &early);
        e = NULL;
    }
    if (t->state == LAPSE_T_NEW) {
        if (!g_ctor_done)
            early_setup(t);
        else if (g_inited != 1 || thread_setup(t) != 0)
            t->state = LAPSE_T_OFF;
        e = NULL;
    }
    if (t->state == LAPSE_T_EARLY) {
        if (is_open_slot(&t->fill, e)) {
            e->fn = (uint64_t)fn;
            e->stamp = stamp;
        } else if (claimed_count(&t->fill, t->cur) < BUF_USABLE) {
            /* (stamped now: the probe's reading predates the buffer) */
            struct lapse_event *slot = t->cur++;
            slot->fn = (uint64_t)fn;
            slot->stamp = (lapse_ticks() << 1) | is_exit;
        } else {
            t->skipped++;  /* full: counted, handed over with the rest */
            t->deadline = 0; /* (every probe comes here: none writes) */
        }
    }
    if (t->state == LAPSE_T_ACTIVE) {
        /* The slot the probe claimed, if it is one: in the filling buffer
         * (the buffer is due), or in the parked one (a handler took over
         * the buffer between this probe's claim and here). */
        int placed = 0;
        if (is_open_slot(&t->fill, e) || is_open_slot(&t->parked, e)) {
            e->fn = (uint64_t)fn;
            e->stamp = stamp;
            placed = 1;
        }
        int full = !t->fill.base || claimed_count(&t->fill, t->cur) >= BUF_USABLE;
        if (full || now > t->deadline)
            lapse_flush_own(t, 1);
        if (!placed && t->state == LAPSE_T_ACTIVE) {
            /* the hand-over took time: stamp the event after it */
            struct lapse_event *slot = t->cur++;
            slot->fn = (uint64_t)fn;
            slot->stamp = (lapse_ticks() << 1) | is_exit;
        }
    }
    t->in_slow = 0;
    lapse_unblock(&old);
}
