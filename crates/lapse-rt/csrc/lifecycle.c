/* lifecycle.c - the runtime from start to end of a process image: start-up
 * (connect, arena, probe-cost calibration, HELLO), fork (FORK in the parent,
 * CHILD and a new arena in the child), exec (every buffer handed over, EXEC),
 * exit() and fatal signals (every buffer handed over before the process goes).
 *
 * Nothing here allocates with malloc or creates a thread: the runtime's own
 * work never shows up in the profile. Everything the signal handler calls is
 * async-signal-safe (sendmsg, write, sigaction, raise). */
#define _GNU_SOURCE
#include "rt.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int g_inited;                           /* 0 never, 1 running, 2 disabled */
uint32_t g_pid;                         /* pid of this process image */
uint64_t g_flush_ticks = ~0ull / 2;     /* hand-over period (LAPSE_FLUSH_TICKS) */
volatile int g_forking;                 /* between fork's prepare and after handlers */
static uint64_t g_probe_cost;           /* ticks x 1024 */
static uint64_t g_fork_tsc;
static uint32_t g_fork_ptid;

static const int g_fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS};
#define N_FATAL (sizeof g_fatal / sizeof g_fatal[0])
static const int g_term[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
#define N_TERM (sizeof g_term / sizeof g_term[0])
static struct sigaction g_old[65];

NOINSTR uint32_t lapse_gettid(void) { return (uint32_t)syscall(SYS_gettid); }

/* ---- fork ---- */

NOINSTR void lapse_before_fork(void)
{
    struct lapse_tls *t = &lapse_t;
    if (g_inited != 1 || g_no_inherit)
        return;
    sigset_t old;
    lapse_block(&old);
    t->in_slow++;
    /* Until the after-fork handlers run, parent and child share the arena:
     * no thread claims arena buffers, and this one fills a private buffer. */
    g_forking = 1;
    lapse_fork_prepare(t);
    g_fork_tsc = lapse_ticks();
    g_fork_ptid = t->tid ? t->tid : lapse_gettid();
    struct lapse_msg m = lapse_msg_fork(g_pid, g_fork_ptid, g_fork_tsc);
    lapse_send_msg(&m, NULL, 0);
    t->in_slow--;
    lapse_unblock(&old);
}

NOINSTR void lapse_after_fork_parent(void)
{
    g_forking = 0;
    if (g_inited != 1 || g_no_inherit)
        return;
    sigset_t old;
    lapse_block(&old);
    lapse_t.in_slow++;
    lapse_back_to_arena(&lapse_t);
    lapse_t.in_slow--;
    lapse_unblock(&old);
}

/* The child: only the forking thread exists. Its buffer was handed over just
 * before fork, so it starts empty; the recorder gives it the parent's stack. */
NOINSTR void lapse_after_fork_child(void)
{
    struct lapse_tls *self = &lapse_t;
    if (g_inited != 1)
        return;
    if (g_no_inherit) {
        /* --no-inherit: this process is not recorded. Nothing of it may
         * reach the recorder or the parent's arena (shared memory). */
        g_inited = 2;
        self->state = LAPSE_T_OFF;
        self->cur = NULL;
        self->deadline = 0;
        lapse_arena_forget();
        lapse_drop_connection();
        return;
    }
    /* A child of a paused process records (the parent's resume would not
     * reach it): the analysis leaves out what falls in the paused stretch. */
    g_paused = 0;
    sigset_t old;
    lapse_block(&old);
    self->in_slow++;
    uint32_t ppid = g_pid;
    g_pid = (uint32_t)getpid();
    lapse_transport_after_fork();
    lapse_fork_child(self);
    struct lapse_msg m = lapse_msg_child(g_pid, self->tid ? self->tid : lapse_gettid(),
                                         g_fork_tsc, ppid, g_fork_ptid);
    lapse_send_msg(&m, NULL, 0);
    /* the parent's arena is the parent's: this process gets its own */
    lapse_arena_forget();
    lapse_arena_create();
    g_forking = 0;
    lapse_back_to_arena(self);
    self->in_slow--;
    lapse_unblock(&old);
}

/* ---- exec, exit, signals ---- */

NOINSTR void lapse_before_exec(void)
{
    if (g_inited != 1 || (uint32_t)getpid() != g_pid)
        return; /* not started, or a vfork child sharing the parent's memory */
    lapse_flush_all();
    struct lapse_msg m = lapse_msg_exec(g_pid, lapse_gettid(), lapse_ticks());
    lapse_send_msg(&m, NULL, 0);
}

/* Fatal signal: hand over everything, then let the original disposition act. */
NOINSTR static void on_signal(int sig)
{
    int saved = errno;
    if ((uint32_t)getpid() == g_pid)
        lapse_flush_all();
    sigaction(sig, &g_old[sig], NULL);
    errno = saved;
    raise(sig);
}

NOINSTR static void install_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    for (size_t i = 0; i < N_FATAL + N_TERM; i++) {
        int sig = i < N_FATAL ? g_fatal[i] : g_term[i - N_FATAL];
        struct sigaction old;
        if (sigaction(sig, NULL, &old) != 0 || old.sa_handler != SIG_DFL)
            continue; /* ignored or handled by someone else: leave it alone */
        g_old[sig] = old;
        sigaction(sig, &sa, NULL);
    }
}

/* ---- start-up ---- */

NOINSTR static void lapse_init_connected(void);

NOINSTR void lapse_init(void)
{
    int expected = 0;
    if (!__atomic_compare_exchange_n(&g_inited, &expected, 2, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return; /* done or under way */
    /* Probes that ran before this (early) are kept aside, so that
     * calibration cannot touch them, and handed over after HELLO. */
    struct lapse_early early;
    lapse_early_detach(&lapse_t, &early);
    lapse_init_connected();
    lapse_early_send(&lapse_t, &early);
    if (g_inited != 1)
        lapse_t.state = LAPSE_T_OFF;
}

/* The rest of start-up: connection, arena, calibration, HELLO. */
NOINSTR static void lapse_init_connected(void)
{
    lapse_env_init();
    const char *path = lapse_env(LAPSE_ENV_SOCKET);
    if (!path || !*path)
        return;
    lapse_connect(path);
    if (g_fd < 0 && !lapse_env(LAPSE_ENV_SPILL))
        return;
    g_pid = (uint32_t)getpid();
    g_no_arena = lapse_env(LAPSE_ENV_NO_ARENA) != NULL;
    lapse_arena_create();
    const char *flush = lapse_env(LAPSE_ENV_FLUSH_TICKS);
    if (flush && *flush) {
        char *endp = NULL;
        unsigned long long v = strtoull(flush, &endp, 10);
        if (endp && *endp == 0 && v > 0)
            g_flush_ticks = v;
    }
    /* (once per process image: an attached runtime starts again at each attach) */
    static int registered;
    if (!registered) {
        if (lapse_threads_init() != 0)
            return;
        pthread_atfork(lapse_before_fork, lapse_after_fork_parent, lapse_after_fork_child);
        registered = 1;
    }
    /* (attached: the program's signal dispositions stay as they are) */
    if (g_attached == ATTACH_NONE)
        install_handlers();
    __atomic_store_n(&g_inited, 1, __ATOMIC_RELEASE);
    int calibrate = g_attached == ATTACH_ON || getenv(LAPSE_ENV_CALIBRATE) != NULL;
    if (calibrate) {
        /* only the first process measures; its children inherit the value */
        if (g_attached == ATTACH_NONE)
            unsetenv(LAPSE_ENV_CALIBRATE);
        struct lapse_tls *t = &lapse_t;
        uint32_t in_slow = t->in_slow; /* we may be inside the first probe */
        t->in_slow = 0;
        g_probe_cost = lapse_measure_probe_cost();
        t->in_slow = in_slow;
        /* calibration events go out marked discard; numbering starts again */
        if (t->state == LAPSE_T_ACTIVE)
            lapse_flush_final(t);
        t->discard = 0;
        t->next = 0;
        t->skipped = 0;
        t->stalled = 0;
    }
    lapse_control_init();
    struct lapse_msg m =
        lapse_msg_hello(g_pid, lapse_gettid(), g_probe_cost, (uint32_t)lapse_probe_spread,
                        lapse_ticks(), (uint32_t)getppid());
    lapse_send_msg(&m, NULL, 0);
}

__attribute__((constructor(101), no_instrument_function)) static void lapse_ctor(void)
{
    g_ctor_done = 1;
    if (g_inited == 0)
        lapse_init();
    /* every module loaded with the program is mapped and relocated by now */
    /* (only this thread exists yet: the program's constructors come next;
     * a patched program's library calls are traced as an instrumented
     * module's, so it is patched first) */
    if (g_inited == 1) {
        lapse_patch_apply();
        lapse_filter_load(); /* (after calibration, which measures the kept path) */
    }
    lapse_libcalls_scan();
}

/* exit(): runs after the program's own atexit handlers and destructors. */
__attribute__((destructor(101), no_instrument_function)) static void lapse_dtor(void)
{
    if (g_inited == 1 && (uint32_t)getpid() == g_pid)
        lapse_flush_all();
}
