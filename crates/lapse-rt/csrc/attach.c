/* attach.c - the runtime loaded into a process that is already running
 * (`lapse record --method instrument --pid`).
 *
 * The recorder stops every thread of the process with ptrace, makes one of
 * them call the C library's dlopen on this library (its constructor finds no
 * LAPSE_SOCKET and leaves the runtime disabled), then lapse_rt_attach with
 * what the environment would have said, points the program's probe imports
 * at this library's hooks and lets the threads run. At the end it stops them
 * again, puts the imports back and calls lapse_rt_detach, which hands every
 * thread's events over and leaves the runtime idle: loaded, connected to
 * nothing, its hooks unreachable. A later attach finds it loaded and calls
 * lapse_rt_attach again.
 *
 * Both entry points run while every other thread is stopped, on a thread
 * whose frames are the program's: they must not wait for another thread
 * (no lock another thread could hold: no malloc, no dlopen, no stdio).
 *
 * What attaching leaves out, unlike a preloaded runtime: no handlers for
 * fatal or termination signals (the program's dispositions stay as they
 * are; the recorder reads what a killed process left in the arena), no
 * tracing of calls into other libraries, and children the process had
 * before the attach are not followed (forks during the window are). */
#include "rt.h"

#include <signal.h>
#include <string.h>

#define EXPORT __attribute__((no_instrument_function, visibility("default")))

int g_attached; /* ATTACH_* */

/* Every thread starts afresh at the next attach: its buffers (handed over
 * already) are forgotten, and its next probe after lapse_rt_attach sets it
 * up again. The registry is emptied (a thread that ends while the runtime
 * is idle takes its state with it, which nothing may point to then). */
NOINSTR static void forget_thread(struct lapse_tls *t)
{
    t->cur = NULL;
    t->deadline = 0; /* every probe takes the slow path, which does nothing now */
    t->fill = (struct lapse_buf){0};
    for (int k = 0; k < LAPSE_PARKED; k++)
        t->parked[k] = (struct lapse_buf){0};
    t->nparked = 0;
    t->slot = -1;
    t->first_next = 0;
    t->state = LAPSE_T_NEW;
}

/* Every registered thread forgets its buffers (handed over first with
 * `flush`), the connection goes, the runtime is idle. */
NOINSTR static void go_idle(int flush)
{
    if (flush)
        lapse_flush_all();
    for (int i = 0; i < LAPSE_MAX_THREADS; i++) {
        struct lapse_tls *t = __atomic_exchange_n(&g_threads[i], NULL, __ATOMIC_ACQ_REL);
        if (t)
            forget_thread(t);
    }
    forget_thread(&lapse_t);
    __atomic_store_n(&g_inited, 2, __ATOMIC_RELEASE);
    lapse_drop_connection();
    g_attached = ATTACH_IDLE;
}

/* `vars`: "NAME=value" lines, as the environment would have them (the
 * recorder writes them into the process's stack). 0 when connected; -1 when
 * a preloaded runtime records this process already, -2 when another
 * recorder is attached, -3 when the recorder could not be reached. */
EXPORT int lapse_rt_attach(const char *vars)
{
    if (g_inited == 1 && g_attached != ATTACH_ON)
        return -1;
    if (g_attached == ATTACH_ON) {
        if (g_inited == 1 && !lapse_recorder_gone())
            return -2;
        go_idle(0); /* (the last recorder died without detaching) */
    }
    lapse_env_give(vars);
    if (g_attached == ATTACH_IDLE) {
        lapse_transport_reattach();
        lapse_arena_forget(); /* (idle since the last detach: no thread writes there) */
    }
    g_attached = ATTACH_ON;
    /* (this thread's first lapse_init, at dlopen, found no recorder) */
    if (lapse_t.state == LAPSE_T_OFF)
        forget_thread(&lapse_t);
    __atomic_store_n(&g_inited, 0, __ATOMIC_RELEASE);
    lapse_init();
    if (g_inited != 1) {
        g_attached = ATTACH_IDLE;
        return -3;
    }
    return 0;
}

/* Hands every thread's events over and goes idle; 0, or -1 when not
 * attached. The recorder has put the imports back already, so no probe
 * starts after this; one that a thread was stopped in finishes into a
 * buffer nobody reads (the arena stays mapped until the next attach). */
EXPORT int lapse_rt_detach(void)
{
    if (g_attached != ATTACH_ON)
        return -1;
    go_idle(1);
    return 0;
}

/* The slow path of an attached runtime's thread (t, the caller's own, with
 * signals blocked): when the recorder is gone without detaching (killed),
 * nobody will; the runtime stops recording, and each thread, as it gets
 * here, forgets its buffers and leaves the registry (it may end before the
 * next attach). Its probes then cost a call each (the slow path's first
 * test) until a later attach turns them off. 1 when t stopped so. Cost
 * while the recorder is there: fstat and poll once per hand-over. */
NOINSTR int lapse_attach_orphaned(struct lapse_tls *t)
{
    if (g_attached != ATTACH_ON || t->state != LAPSE_T_ACTIVE)
        return 0;
    if (g_inited == 1 && !lapse_recorder_gone())
        return 0;
    __atomic_store_n(&g_inited, 2, __ATOMIC_RELEASE);
    if (t->slot >= 0)
        __atomic_store_n(&g_threads[t->slot], NULL, __ATOMIC_RELEASE);
    forget_thread(t);
    return 1;
}
