/* threads.c - threads and the slow path: setting a thread up (or keeping
 * its probes aside before start-up), the slow path that hands its buffer
 * over (buffers.c) when full or when LAPSE_FLUSH_TICKS have passed since the
 * last hand-over (so a quiet thread's events still arrive within ~100 ms),
 * and letting it go when the thread ends.
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
    t->undelivered = 0; /* (counted in the parent's arena) */
    t->undelivered_in = NULL;
    if (t->fill.base) {
        t->cur = t->fill.base;
        t->fill.first = 0;
        t->fill.claimed = lapse_ticks(); /* what the parent wrote there is not ours */
    }
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
        lapse_flush_final(t);
        t->state = LAPSE_T_OFF;
        /* (the thread's own frames have all ended by now: entries a
         * cancellation left unhooked go with the shadow stack) */
        lapse_shadow_drop_all(t);
        lapse_shadow_free(t);
        for (int k = 0; k < LAPSE_PARKED + 1; k++) {
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
    /* a recording by sampling: the runtime is there for pause, resume and
     * marks only, its threads record nothing (control.c) */
    if (lapse_env(LAPSE_ENV_CONTROL_ONLY))
        return -1;
    t->next = t->first_next;
    t->skipped = 0;
    t->stalled = 0;
    t->tid = lapse_gettid();
    t->self = (uint64_t)pthread_self();
    for (int k = 0; k < LAPSE_PARKED; k++)
        t->parked[k] = (struct lapse_buf){0};
    t->nparked = 0;
    t->state = LAPSE_T_ACTIVE;
    thread_register(t);
    if (lapse_take_buffer(t) != 0) {
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
    if (lapse_take_private(t, &t->fill) != 0) {
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
    out->count = lapse_claimed_count(&t->fill, t->cur);
    out->lost = t->skipped;
    for (int k = 0; k < LAPSE_PARKED + 1; k++) {
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
        uint32_t ok = lapse_written_prefix(&early->buf, early->count);
        for (uint32_t i = ok; i < early->count; i++)
            if (!lapse_slot_written(&early->buf, &early->buf.base[i]))
                early->buf.base[i].fn = LAPSE_HOLE_FN;
        struct lapse_msg m =
            lapse_msg_events(g_pid, lapse_gettid(), 0, 0, early->count, 0);
        lapse_send_msg(&m, early->buf.base, early->count * sizeof(struct lapse_event));
    }
    /* the thread's own events go on after these */
    t->first_next = early->count + early->buf.leaves + early->lost;
    if (t->state == LAPSE_T_ACTIVE && !t->fill.base)
        t->next = t->first_next;
    if (early->map)
        munmap(early->map, 2 * BUF_BYTES);
    *early = (struct lapse_early){0};
}

/* ---- the slow path ---- */

NOINSTR void lapse_thread_start(struct lapse_tls *t)
{
    sigset_t old;
    lapse_block(&old);
    if (t->state == LAPSE_T_NEW && !t->in_slow) {
        t->in_slow = 1;
        if (!g_ctor_done)
            early_setup(t);
        else if (g_inited != 1 ? g_attached == ATTACH_NONE : thread_setup(t) != 0)
            t->state = LAPSE_T_OFF; /* (an idle attached runtime: set up at the next attach) */
        t->in_slow = 0;
    }
    lapse_unblock(&old);
}

NOINSTR void lapse_hand_over_due(struct lapse_tls *t)
{
    sigset_t old;
    lapse_block(&old);
    if (t->state == LAPSE_T_ACTIVE && !t->in_slow) {
        t->in_slow = 1;
        if (g_attached && lapse_attach_orphaned(t))
            ; /* (stopped recording) */
        else if (lapse_ticks() > t->deadline)
            lapse_flush_own(t, 1);
        t->in_slow = 0;
    }
    lapse_unblock(&old);
}

/* e is a slot of b that this thread claimed and nobody wrote yet. */
NOINSTR static int is_open_slot(const struct lapse_buf *b, const struct lapse_event *e)
{
    return b->base && e >= b->base && e < b->base + BUF_USABLE && !lapse_slot_written(b, e);
}

NOINSTR void lapse_slow_path(struct lapse_tls *t, struct lapse_event *e, void *fn,
                             uint64_t is_exit, uint64_t now, uintptr_t sp)
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
            lapse_put(e, (uint64_t)fn, stamp, sp);
        } else if (t->state == LAPSE_T_ACTIVE) {
            t->skipped++;
        }
        lapse_unblock(&old);
        return;
    }
    t->in_slow = 1;
    if (g_attached && lapse_attach_orphaned(t)) {
        t->in_slow = 0;
        lapse_unblock(&old);
        return;
    }
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
        else if (g_inited != 1 ? g_attached == ATTACH_NONE : thread_setup(t) != 0)
            t->state = LAPSE_T_OFF; /* (an idle attached runtime: set up at the next attach) */
        e = NULL;
    }
    if (t->state == LAPSE_T_EARLY) {
        if (is_open_slot(&t->fill, e)) {
            lapse_put(e, (uint64_t)fn, stamp, sp);
        } else if (lapse_claimed_count(&t->fill, t->cur) < BUF_USABLE) {
            /* (stamped now: the probe's reading predates the buffer) */
            struct lapse_event *slot = t->cur++;
            lapse_put(slot, (uint64_t)fn, (lapse_ticks() << 1) | is_exit, sp);
        } else {
            t->skipped++;  /* full: counted, handed over with the rest */
            t->deadline = 0; /* (every probe comes here: none writes) */
        }
    }
    if (t->state == LAPSE_T_ACTIVE) {
        /* The slot the probe claimed, if it is one: in the filling buffer
         * (the buffer is due), or in a parked one (a handler took over
         * the buffer between this probe's claim and here). */
        int placed = 0;
        if (is_open_slot(&t->fill, e) || lapse_is_parked_slot(t, e)) {
            lapse_put(e, (uint64_t)fn, stamp, sp);
            placed = 1;
        }
        int full = !t->fill.base || lapse_claimed_count(&t->fill, t->cur) >= BUF_USABLE;
        if (full || now > t->deadline)
            lapse_flush_own(t, 1);
        if (!placed && t->state == LAPSE_T_ACTIVE) {
            /* the hand-over took time: stamp the event after it */
            struct lapse_event *slot = t->cur++;
            lapse_put(slot, (uint64_t)fn, (lapse_ticks() << 1) | is_exit, sp);
        }
    }
    t->in_slow = 0;
    lapse_unblock(&old);
}
