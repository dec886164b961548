/* control.c - pausing, resuming and marking a recording from inside the
 * program: the functions `lapse header`'s lapse_pause(), lapse_resume() and
 * lapse_mark() look up (dlsym), the lapse crate's lapse::pause() and
 * friends, the toggle signal (`record --signal SIG`) and a paused start
 * (`--start-paused`, `--delay`).
 *
 * Paused is one word per process image, g_paused: every probe reads it
 * first (rt.h, trampoline.c) and records nothing while it is set (one load
 * and one branch; BENCHMARKS.md has the measurement). The recorder learns
 * each pause and resume from a CONTROL datagram stamped with the tick count,
 * and the analysis leaves out whatever lies in a paused stretch, so a probe
 * that read the word just before a pause and wrote just after is dropped
 * there, not here. A mark is a CONTROL datagram with the text as its body.
 *
 * These are API calls, not probes: they may make a system call (the
 * datagram), never allocate, and are async-signal-safe (the toggle signal's
 * handler runs them). */
#define _GNU_SOURCE
#include "rt.h"

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXPORT __attribute__((no_instrument_function, visibility("default")))

volatile uint32_t g_paused;
uint64_t g_resume_ns;         /* a paused start resumes then (CLOCK_MONOTONIC), 0: never */
static int g_toggle_sig;      /* --signal's number, 0: none */
static volatile int g_toggle_taken; /* the program installed its own handler for it */

/* Sends one CONTROL datagram from the calling thread (signals blocked, so a
 * handler's probes cannot run the slow path in between). */
NOINSTR static void send_control(uint32_t op, uint64_t ticks, const char *text, uint32_t len)
{
    if (__atomic_load_n(&g_inited, __ATOMIC_ACQUIRE) != 1)
        return;
    sigset_t old;
    lapse_block(&old);
    struct lapse_tls *t = &lapse_t;
    t->in_slow++;
    uint32_t tid = t->tid ? t->tid : lapse_gettid();
    struct lapse_msg m = lapse_msg_control(g_pid, tid, op, ticks, t->stalled, len);
    lapse_send_msg(&m, text, len);
    t->in_slow--;
    lapse_unblock(&old);
}

NOINSTR static void do_pause(int tell)
{
    if (__atomic_exchange_n(&g_paused, 1, __ATOMIC_SEQ_CST))
        return; /* already paused */
    /* stamped after the word is set: a probe stamped later that still
     * wrote (it read the word before) lies in the paused stretch */
    if (tell)
        send_control(LAPSE_CONTROL_PAUSE, lapse_ticks(), NULL, 0);
}

NOINSTR static void do_resume(int tell)
{
    if (!__atomic_load_n(&g_paused, __ATOMIC_SEQ_CST))
        return;
    /* stamped before the word is cleared: every event after it is later */
    uint64_t now = lapse_ticks();
    if (tell)
        send_control(LAPSE_CONTROL_RESUME, now, NULL, 0);
    __atomic_store_n(&g_paused, 0, __ATOMIC_SEQ_CST);
}

EXPORT void lapse_rt_pause(void) { do_pause(1); }

EXPORT void lapse_rt_resume(void)
{
    g_resume_ns = 0; /* the program decides from now on */
    do_resume(1);
}

EXPORT void lapse_rt_mark(const char *text)
{
    uint64_t now = lapse_ticks();
    if (!text)
        text = "";
    size_t len = strnlen(text, LAPSE_MARK_TEXT_MAX);
    send_control(LAPSE_CONTROL_MARK, now, text, (uint32_t)len);
}

/* A probe while paused (out of line: the probe itself only tests the
 * word). A paused start with a resume time (`--delay`) ends here: the
 * recorder has written that stretch itself, so nothing is sent. */
NOINSTR void lapse_paused_probe(void)
{
    if (g_resume_ns && lapse_monotonic_ns() >= g_resume_ns) {
        g_resume_ns = 0;
        do_resume(0);
    }
}

/* ---- the toggle signal ---- */

NOINSTR static void on_toggle(int sig)
{
    (void)sig;
    if (g_toggle_taken)
        return;
    int saved = errno;
    g_resume_ns = 0;
    if (g_paused)
        do_resume(1);
    else
        do_pause(1);
    errno = saved;
}

/* The program asks for its own disposition of the toggle signal (a
 * handler, or to ignore it): it gets it, the signal stops toggling, and the
 * recorder says so. Called by the sigaction/signal wrappers below. */
NOINSTR static int takes_toggle(int sig, const struct sigaction *act)
{
    if (!g_toggle_sig || sig != g_toggle_sig || !act || g_toggle_taken)
        return 0;
    if (act->sa_handler == SIG_DFL && !(act->sa_flags & SA_SIGINFO))
        return 0; /* back to the default: ours stays (the default would end it) */
    g_toggle_taken = 1;
    send_control(LAPSE_CONTROL_SIGNAL_TAKEN, lapse_ticks(), NULL, 0);
    return 1;
}

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);

NOINSTR static sigaction_fn real_sigaction(void)
{
    static sigaction_fn real;
    if (!real)
        real = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
    return real;
}

/* While the toggle is ours, the program's queries of the signal's
 * disposition see the default, as without lapse. */
EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    sigaction_fn real = real_sigaction();
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    if (g_toggle_sig && sig == g_toggle_sig && !g_toggle_taken) {
        if (!takes_toggle(sig, act)) {
            if (old) {
                memset(old, 0, sizeof *old);
                old->sa_handler = SIG_DFL;
            }
            return 0;
        }
        struct sigaction mine;
        int rc = real(sig, act, &mine);
        if (rc == 0 && old) {
            memset(old, 0, sizeof *old);
            old->sa_handler = SIG_DFL;
        }
        return rc;
    }
    return real(sig, act, old);
}

typedef sighandler_t (*signal_fn)(int, sighandler_t);

NOINSTR static signal_fn real_signal(void)
{
    static signal_fn real;
    if (!real)
        real = (signal_fn)dlsym(RTLD_NEXT, "signal");
    return real;
}

EXPORT sighandler_t signal(int sig, sighandler_t handler)
{
    if (!g_toggle_sig || sig != g_toggle_sig || g_toggle_taken) {
        /* not the toggle: the C library's own, exactly (siginterrupt and all) */
        signal_fn real = real_signal();
        if (real)
            return real(sig, handler);
    }
    struct sigaction act, old;
    memset(&act, 0, sizeof act);
    act.sa_handler = handler;
    sigemptyset(&act.sa_mask);
    act.sa_flags = SA_RESTART;
    if (sigaction(sig, &act, &old) != 0)
        return SIG_ERR;
    return old.sa_handler;
}

/* Start-up (after calibration, before HELLO): a paused start, the toggle
 * signal's handler. LAPSE_PAUSED is for the first process only: a program
 * it starts later finds the recording in whatever state it is then, which
 * the recorder knows, so it starts recording (the analysis leaves out what
 * falls in a paused stretch). */
NOINSTR void lapse_control_init(void)
{
    real_sigaction(); /* (looked up now: not in a signal handler) */
    real_signal();
    const char *paused = getenv(LAPSE_ENV_PAUSED);
    if (paused) {
        const char *resume = getenv(LAPSE_ENV_RESUME_NS);
        if (resume && *resume)
            g_resume_ns = strtoull(resume, NULL, 10);
        __atomic_store_n(&g_paused, 1, __ATOMIC_SEQ_CST);
        unsetenv(LAPSE_ENV_PAUSED);
        unsetenv(LAPSE_ENV_RESUME_NS);
    }
    const char *sig = lapse_env(LAPSE_ENV_SIGNAL);
    if (sig && *sig) {
        int n = atoi(sig);
        sigaction_fn real = real_sigaction();
        struct sigaction cur;
        if (n > 0 && n < NSIG && real && real(n, NULL, &cur) == 0 && cur.sa_handler == SIG_DFL &&
            !(cur.sa_flags & SA_SIGINFO)) {
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = on_toggle;
            sigemptyset(&sa.sa_mask);
            sa.sa_flags = SA_RESTART;
            g_toggle_sig = n;
            real(n, &sa, NULL);
        }
    }
}
