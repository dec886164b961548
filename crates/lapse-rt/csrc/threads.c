/* threads.c - per-thread buffers and the slow path: setting a thread up,
 * handing its buffer over (when full, or when LAPSE_FLUSH_TICKS have passed
 * since the last hand-over, so a quiet thread's events still arrive within
 * ~100 ms), and letting it go when the thread ends. */
#define _GNU_SOURCE
#include "rt.h"

#include <pthread.h>
#include <sys/mman.h>

struct lapse_tls *g_threads[LAPSE_MAX_THREADS];
static pthread_key_t g_key;

/* Sends [base, upto) of thread t as events first_index... */
NOINSTR void lapse_send_events(struct lapse_tls *t, struct lapse_event *upto)
{
    size_t count = (size_t)(upto - t->base);
    if (count == 0)
        return;
    struct lapse_msg m =
        lapse_msg_events(g_pid, t->tid, t->sent, t->stalled, (uint32_t)count, t->discard);
    lapse_send_msg(&m, t->base, count * sizeof(struct lapse_event));
}

/* The calling thread's own buffer: hand it over and take the next one. */
NOINSTR void lapse_flush_own(struct lapse_tls *t)
{
    if (t->state != LAPSE_T_ACTIVE)
        return;
    uint64_t t0 = lapse_ticks();
    size_t count = t->base ? (size_t)(t->cur - t->base) : 0;
    if (count) {
        if (t->buf >= 0)
            lapse_arena_hand_over(t, (uint32_t)count);
        else
            lapse_send_events(t, t->cur);
        t->sent += count;
        t->buf = -1;
        t->base = t->cur = t->end = NULL;
    }
    if (!t->base && lapse_take_buffer(t) != 0)
        t->state = LAPSE_T_OFF; /* no memory: this thread is no longer recorded */
    t->deadline = t0 + g_flush_ticks;
    /* The wait for the socket is lapse's doing, not the program's: counted
     * here and taken out of the thread's timeline by the recorder. */
    t->stalled += lapse_ticks() - t0;
}

/* Every thread's buffer, at exit, exec or a crash. Other threads may still be
 * running: their buffers are sent as they are without being reset, and the
 * event index in the header lets the recorder drop what it gets twice. */
NOINSTR void lapse_flush_all(void)
{
    struct lapse_tls *self = &lapse_t;
    for (int i = 0; i < LAPSE_MAX_THREADS; i++) {
        struct lapse_tls *t = __atomic_load_n(&g_threads[i], __ATOMIC_ACQUIRE);
        if (!t || t == self)
            continue;
        struct lapse_event *base = __atomic_load_n(&t->base, __ATOMIC_ACQUIRE);
        struct lapse_event *upto = __atomic_load_n(&t->cur, __ATOMIC_ACQUIRE);
        if (base && upto > base && upto <= base + LAPSE_BUF_EVENTS)
            lapse_send_events(t, upto);
    }
    self->in_slow++;
    lapse_flush_own(self);
    self->in_slow--;
}

NOINSTR static void thread_done(void *arg)
{
    struct lapse_tls *t = arg;
    if (t != &lapse_t || t->state != LAPSE_T_ACTIVE)
        return;
    t->in_slow++;
    lapse_flush_own(t);
    /* Later key destructors may still run instrumented code: stay armed for
     * the rounds glibc allows, then let the buffer go. */
    if (++t->dtor_rounds < 3) {
        pthread_setspecific(g_key, t);
        t->in_slow--;
        return;
    }
    if (t->slot >= 0)
        __atomic_store_n(&g_threads[t->slot], NULL, __ATOMIC_RELEASE);
    t->state = LAPSE_T_OFF;
    lapse_drop_buffer(t);
    if (t->own)
        munmap(t->own, BUF_BYTES);
    t->own = NULL;
    t->in_slow--;
}

NOINSTR int lapse_threads_init(void)
{
    return pthread_key_create(&g_key, thread_done);
}

NOINSTR static int thread_setup(struct lapse_tls *t)
{
    t->slot = -1;
    for (int i = 0; i < LAPSE_MAX_THREADS; i++) {
        struct lapse_tls *expected = NULL;
        if (__atomic_compare_exchange_n(&g_threads[i], &expected, t, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED)) {
            t->slot = i;
            break;
        }
    }
    if (t->slot < 0)
        return -1;
    t->sent = 0;
    t->stalled = 0;
    t->tid = lapse_gettid();
    t->buf = -1;
    t->own = NULL;
    t->base = t->cur = t->end = NULL;
    if (lapse_take_buffer(t) != 0) {
        __atomic_store_n(&g_threads[t->slot], NULL, __ATOMIC_RELEASE);
        return -1;
    }
    t->deadline = lapse_ticks() + g_flush_ticks;
    t->state = LAPSE_T_ACTIVE;
    pthread_setspecific(g_key, t);
    return 0;
}

NOINSTR void lapse_slow_path(struct lapse_tls *t, void *fn, uint64_t is_exit, uint64_t now)
{
    if (t->in_slow || t->state == LAPSE_T_OFF)
        return;
    t->in_slow = 1;
    if (t->state == LAPSE_T_NEW) {
        if (g_inited == 0)
            lapse_init();
        /* lapse_init's calibration may have set this thread up already */
        if (t->state == LAPSE_T_NEW && (g_inited != 1 || thread_setup(t) != 0)) {
            t->state = LAPSE_T_OFF;
            t->in_slow = 0;
            return;
        }
    } else {
        lapse_flush_own(t);
    }
    if (t->state != LAPSE_T_ACTIVE || !t->base) {
        t->in_slow = 0;
        return;
    }
    (void)now; /* the hand-over took time: stamp the event after it */
    struct lapse_event *e = t->cur++;
    e->fn = (uint64_t)fn;
    e->stamp = (lapse_ticks() << 1) | is_exit;
    t->in_slow = 0;
}
