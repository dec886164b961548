/* runtime.c - the runtime's slow path: set-up, handing buffers to the
 * recorder (when full, or when LAPSE_FLUSH_TICKS have passed since the last
 * hand-over, so a quiet thread's events still arrive within ~100 ms), and
 * keeping events through thread exit, fork, exec, exit() and fatal signals.
 *
 * Transport: one SOCK_SEQPACKET connection per process image to the socket
 * named by LAPSE_SOCKET; every datagram is a struct lapse_msg. Datagrams are
 * atomic, so threads share the connection without a lock, and a fork child
 * keeps using the inherited one (the order parent FORK -> child CHILD is then
 * the order the recorder reads).
 *
 * Events travel through a shared arena (see lapse_rt.h): a thread fills an
 * arena buffer in place and hands it over with a 40-byte SHM_EVENTS
 * datagram, so no event is copied through the kernel. When the arena has no
 * free buffer and the recorder has none to give back (many threads each
 * holding one), a thread uses a private buffer sent as an EVENTS datagram
 * (the events follow the header), as it also does while forking.
 *
 * If the recorder goes away, datagrams, and the arena buffers it had not
 * freed yet (oldest first), are appended to LAPSE_SPILL (a file next to the
 * output) instead.
 *
 * Nothing here allocates with malloc or creates a thread: the runtime's own
 * work never shows up in the profile. Everything the signal handler calls is
 * async-signal-safe (sendmsg, write, sigaction, raise). */
#define _GNU_SOURCE
#include "lapse_rt.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#define NOINSTR __attribute__((no_instrument_function))

static int g_fd = -1;             /* connection to the recorder */
static int g_spill_fd = -1;       /* fallback when the recorder is gone */
static int g_inited;              /* 0 never, 1 running, 2 disabled */
static uint32_t g_pid;            /* pid of this process image */
static uint64_t g_probe_cost;     /* ticks x 1024 */
static uint64_t g_flush_ticks = ~0ull / 2; /* hand-over period (LAPSE_FLUSH_TICKS) */
static pthread_key_t g_key;
static uint64_t g_fork_tsc;
static uint32_t g_fork_ptid;
static struct lapse_tls *g_threads[LAPSE_MAX_THREADS];
static struct lapse_arena *g_arena; /* NULL: private buffers only */
static size_t g_arena_bytes;
static int g_no_arena;              /* LAPSE_NO_ARENA: always private buffers */
static volatile int g_forking;      /* between fork's prepare and after handlers */
static int g_spill_lock;

#define BUF_BYTES (LAPSE_BUF_EVENTS * sizeof(struct lapse_event))

static const int g_fatal[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS};
#define N_FATAL (sizeof g_fatal / sizeof g_fatal[0])
static const int g_term[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
#define N_TERM (sizeof g_term / sizeof g_term[0])
static struct sigaction g_old[65];

NOINSTR static uint32_t lapse_gettid(void) { return (uint32_t)syscall(SYS_gettid); }

NOINSTR static void spill(const struct iovec *iov, int n)
{
    if (g_spill_fd < 0) {
        const char *path = getenv("LAPSE_SPILL");
        if (!path)
            return;
        g_spill_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (g_spill_fd < 0)
            return;
    }
    uint32_t len = 0;
    for (int i = 0; i < n; i++)
        len += (uint32_t)iov[i].iov_len;
    struct iovec all[3] = {{&len, sizeof len}};
    for (int i = 0; i < n && i < 2; i++)
        all[i + 1] = iov[i];
    (void)!writev(g_spill_fd, all, n + 1);
}

/* Sends one datagram; blocks while the recorder catches up (backpressure
 * keeps the recorder's memory bounded). -1 when the recorder is gone. */
NOINSTR static int try_send(struct msghdr *mh)
{
    if (g_fd < 0)
        return -1;
    for (;;) {
        if (sendmsg(g_fd, mh, MSG_NOSIGNAL) >= 0)
            return 0;
        if (errno != EINTR)
            break;
    }
    /* EBADF: the program closed our descriptor; that number may be its own
     * file by now, so leave it alone. */
    if (errno != EBADF)
        close(g_fd);
    g_fd = -1;
    return -1;
}

/* Sends one datagram, or appends it to the spill file. */
NOINSTR static void send_msg(struct lapse_msg *m, const void *body, size_t body_len)
{
    m->magic = LAPSE_MAGIC;
    struct iovec iov[2] = {{m, sizeof *m}, {(void *)body, body_len}};
    int n = body_len ? 2 : 1;
    struct msghdr mh = {0};
    mh.msg_iov = iov;
    mh.msg_iovlen = n;
    if (try_send(&mh) != 0)
        spill(iov, n);
}

/* Sends [base, upto) of thread t as events first_index... */
NOINSTR static void send_events(struct lapse_tls *t, struct lapse_event *upto)
{
    size_t count = (size_t)(upto - t->base);
    if (count == 0)
        return;
    struct lapse_msg m = {0};
    m.kind = LAPSE_MSG_EVENTS;
    m.flags = t->discard ? LAPSE_FLAG_DISCARD : 0;
    m.pid = g_pid;
    m.tid = t->tid;
    m.a = t->sent;
    m.b = t->stalled;
    m.c = (uint32_t)count;
    send_msg(&m, t->base, count * sizeof(struct lapse_event));
}

/* ---- the shared arena ---- */

NOINSTR static struct lapse_event *arena_buf(struct lapse_arena *a, int i)
{
    return (struct lapse_event *)((char *)a + LAPSE_ARENA_HEAD + (size_t)i * BUF_BYTES);
}

/* Creates this process image's arena and passes its memfd to the recorder.
 * Leaves g_arena NULL (private buffers) if anything fails. */
NOINSTR static void arena_create(void)
{
    g_arena = NULL;
    if (g_fd < 0 || g_no_arena)
        return;
    size_t bytes = LAPSE_ARENA_HEAD + (size_t)LAPSE_ARENA_BUFS * BUF_BYTES;
    int fd = (int)syscall(SYS_memfd_create, "lapse-arena", 1u /* MFD_CLOEXEC */);
    if (fd < 0)
        return;
    void *mem = MAP_FAILED;
    if (ftruncate(fd, (off_t)bytes) == 0)
        mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mem == MAP_FAILED) {
        close(fd);
        return;
    }
    struct lapse_arena *a = mem;
    a->magic = LAPSE_ARENA_MAGIC;
    a->nbufs = LAPSE_ARENA_BUFS;
    struct lapse_msg m = {0};
    m.magic = LAPSE_MAGIC;
    m.kind = LAPSE_MSG_ARENA;
    m.pid = g_pid;
    m.tid = lapse_gettid();
    m.a = bytes;
    m.c = LAPSE_ARENA_BUFS;
    m.d = LAPSE_BUF_EVENTS;
    struct iovec iov = {&m, sizeof m};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl.buf;
    mh.msg_controllen = sizeof ctl.buf;
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    int sent = try_send(&mh) == 0;
    close(fd); /* the recorder has its own copy now */
    if (!sent) {
        munmap(mem, bytes);
        return;
    }
    g_arena_bytes = bytes;
    g_arena = a;
}

/* The recorder is gone: the buffers it had not freed go to the spill file,
 * oldest first (so each thread's events stay in order), one thread at a time. */
NOINSTR static void spill_queued(void)
{
    struct lapse_arena *a = g_arena;
    if (!a)
        return;
    for (long spins = 0; __atomic_exchange_n(&g_spill_lock, 1, __ATOMIC_ACQUIRE); spins++)
        if (spins > (1l << 24))
            return; /* (a signal handler interrupted the spiller on this thread) */
    for (;;) {
        int best = -1;
        uint64_t best_seq = ~0ull;
        for (int i = 0; i < LAPSE_ARENA_BUFS; i++) {
            if (__atomic_load_n(&a->slot[i].state, __ATOMIC_ACQUIRE) == LAPSE_SLOT_QUEUED &&
                a->slot[i].seq < best_seq) {
                best = i;
                best_seq = a->slot[i].seq;
            }
        }
        if (best < 0)
            break;
        struct lapse_slot *sl = &a->slot[best];
        uint32_t expected = LAPSE_SLOT_QUEUED;
        if (!__atomic_compare_exchange_n(&sl->state, &expected, LAPSE_SLOT_SPILLING, 0,
                                         __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            continue;
        uint32_t count = sl->count <= LAPSE_BUF_EVENTS ? sl->count : LAPSE_BUF_EVENTS;
        struct lapse_msg m = {0};
        m.magic = LAPSE_MAGIC;
        m.kind = LAPSE_MSG_EVENTS;
        m.pid = g_pid;
        m.tid = sl->tid;
        m.a = sl->first;
        m.b = sl->stalled;
        m.c = count;
        struct iovec iov[2] = {{&m, sizeof m}, {arena_buf(a, best), count * sizeof(struct lapse_event)}};
        spill(iov, 2);
        __atomic_store_n(&sl->state, LAPSE_SLOT_FREE, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&g_spill_lock, 0, __ATOMIC_RELEASE);
}

NOINSTR static int recorder_gone(void)
{
    if (g_fd < 0)
        return 1;
    struct pollfd p = {g_fd, POLLOUT, 0};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR));
}

/* A free arena buffer for thread t (waiting while the recorder catches up),
 * or -1 when none will come: no arena, forking, or every buffer held by a
 * thread (the caller then uses a private buffer). */
NOINSTR static int arena_claim(struct lapse_tls *t)
{
    struct lapse_arena *a = g_arena;
    if (!a || g_forking)
        return -1;
    for (;;) {
        uint32_t gen = __atomic_load_n(&a->gen, __ATOMIC_ACQUIRE);
        int queued = 0;
        /* lowest first: the buffers in use stay few and warm */
        for (uint32_t i = 0; i < LAPSE_ARENA_BUFS; i++) {
            uint32_t st = __atomic_load_n(&a->slot[i].state, __ATOMIC_ACQUIRE);
            if (st == LAPSE_SLOT_QUEUED)
                queued++;
            if (st != LAPSE_SLOT_FREE)
                continue;
            uint32_t expected = LAPSE_SLOT_FREE;
            if (__atomic_compare_exchange_n(&a->slot[i].state, &expected, LAPSE_SLOT_FILLING, 0,
                                            __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
                a->slot[i].tid = t->tid;
                a->slot[i].first = t->sent;
                a->slot[i].claimed = lapse_ticks();
                return (int)i;
            }
        }
        if (!queued)
            return -1;
        if (g_fd < 0) {
            spill_queued();
            continue;
        }
        /* wait for the recorder to free a buffer; it bumps gen and wakes us */
        __atomic_add_fetch(&a->waiters, 1, __ATOMIC_ACQ_REL);
        struct timespec ts = {0, 20 * 1000 * 1000};
        syscall(SYS_futex, &a->gen, FUTEX_WAIT, gen, &ts, NULL, 0);
        __atomic_sub_fetch(&a->waiters, 1, __ATOMIC_ACQ_REL);
        if (gen == __atomic_load_n(&a->gen, __ATOMIC_ACQUIRE) && recorder_gone()) {
            if (g_fd >= 0)
                close(g_fd);
            g_fd = -1;
        }
    }
}

/* Queues thread t's arena buffer (count events) for the recorder. */
NOINSTR static void arena_hand_over(struct lapse_tls *t, uint32_t count)
{
    struct lapse_arena *a = g_arena;
    struct lapse_slot *sl = &a->slot[t->buf];
    sl->count = count;
    sl->first = t->sent;
    sl->stalled = t->stalled;
    sl->seq = __atomic_fetch_add(&a->seq, 1, __ATOMIC_ACQ_REL);
    __atomic_store_n(&sl->state, LAPSE_SLOT_QUEUED, __ATOMIC_RELEASE);
    struct lapse_msg m = {0};
    m.magic = LAPSE_MAGIC;
    m.kind = LAPSE_MSG_SHM_EVENTS;
    m.flags = t->discard ? LAPSE_FLAG_DISCARD : 0;
    m.pid = g_pid;
    m.tid = t->tid;
    m.a = t->sent;
    m.b = t->stalled;
    m.c = count;
    m.d = (uint32_t)t->buf;
    struct iovec iov = {&m, sizeof m};
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    if (try_send(&mh) != 0)
        spill_queued(); /* this buffer and any the recorder left */
}

/* Gives thread t a buffer: an arena buffer if one can be had, else its
 * private one (created on first use). -1 when there is no memory for either. */
NOINSTR static int take_buffer(struct lapse_tls *t)
{
    int i = arena_claim(t);
    if (i >= 0) {
        t->buf = i;
        t->base = arena_buf(g_arena, i);
        /* Here, in the hand-over's time rather than the probes': fault in the
         * pages of a buffer never used before (one store per page; what it
         * overwrites is left from the buffer's last use), and take back for
         * writing the lines the recorder read on its core. */
        for (char *p = (char *)t->base; p < (char *)(t->base + LAPSE_BUF_EVENTS); p += 64) {
            if (((uintptr_t)p & 4095) == 0)
                *(volatile uint64_t *)p = 0;
#if defined(__x86_64__)
            __asm__ volatile("prefetchw (%0)" ::"r"(p));
#else
            __builtin_prefetch(p, 1, 3);
#endif
        }
    } else {
        if (!t->own) {
            void *mem = mmap(NULL, BUF_BYTES, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (mem == MAP_FAILED)
                return -1;
            t->own = mem;
        }
        t->buf = -1;
        t->base = t->own;
    }
    t->cur = t->base;
    t->end = t->base + LAPSE_BUF_EVENTS;
    return 0;
}

/* Lets go of thread t's buffer without handing anything over (it is empty). */
NOINSTR static void drop_buffer(struct lapse_tls *t)
{
    if (t->buf >= 0 && g_arena)
        __atomic_store_n(&g_arena->slot[t->buf].state, LAPSE_SLOT_FREE, __ATOMIC_RELEASE);
    t->buf = -1;
    t->base = t->cur = t->end = NULL;
}

/* The calling thread's own buffer: hand it over and take the next one. */
NOINSTR static void flush_own(struct lapse_tls *t)
{
    if (t->state != LAPSE_T_ACTIVE)
        return;
    uint64_t t0 = lapse_ticks();
    size_t count = t->base ? (size_t)(t->cur - t->base) : 0;
    if (count) {
        if (t->buf >= 0)
            arena_hand_over(t, (uint32_t)count);
        else
            send_events(t, t->cur);
        t->sent += count;
        t->buf = -1;
        t->base = t->cur = t->end = NULL;
    }
    if (!t->base && take_buffer(t) != 0)
        t->state = LAPSE_T_OFF; /* no memory: this thread is no longer recorded */
    t->deadline = t0 + g_flush_ticks;
    /* The wait for the socket is lapse's doing, not the program's: counted
     * here and taken out of the thread's timeline by the recorder. */
    t->stalled += lapse_ticks() - t0;
}

/* Every thread's buffer, at exit, exec or a crash. Other threads may still be
 * running: their buffers are sent as they are without being reset, and the
 * event index in the header lets the recorder drop what it gets twice. */
NOINSTR static void flush_all(void)
{
    struct lapse_tls *self = &lapse_t;
    for (int i = 0; i < LAPSE_MAX_THREADS; i++) {
        struct lapse_tls *t = __atomic_load_n(&g_threads[i], __ATOMIC_ACQUIRE);
        if (!t || t == self)
            continue;
        struct lapse_event *base = __atomic_load_n(&t->base, __ATOMIC_ACQUIRE);
        struct lapse_event *upto = __atomic_load_n(&t->cur, __ATOMIC_ACQUIRE);
        if (base && upto > base && upto <= base + LAPSE_BUF_EVENTS)
            send_events(t, upto);
    }
    self->in_slow++;
    flush_own(self);
    self->in_slow--;
}

NOINSTR static void thread_done(void *arg)
{
    struct lapse_tls *t = arg;
    if (t != &lapse_t || t->state != LAPSE_T_ACTIVE)
        return;
    t->in_slow++;
    flush_own(t);
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
    drop_buffer(t);
    if (t->own)
        munmap(t->own, BUF_BYTES);
    t->own = NULL;
    t->in_slow--;
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
    if (take_buffer(t) != 0) {
        __atomic_store_n(&g_threads[t->slot], NULL, __ATOMIC_RELEASE);
        return -1;
    }
    t->deadline = lapse_ticks() + g_flush_ticks;
    t->state = LAPSE_T_ACTIVE;
    pthread_setspecific(g_key, t);
    return 0;
}

static void lapse_init(void);

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
        flush_own(t);
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

/* ---- fork, exec, exit, signals ---- */

NOINSTR static void before_fork(void)
{
    struct lapse_tls *t = &lapse_t;
    if (g_inited != 1)
        return;
    t->in_slow++;
    flush_own(t);
    /* Until the after-fork handlers run, parent and child share the arena:
     * the forking thread writes to a private buffer (copied, not shared, by
     * fork) and no thread claims arena buffers. */
    g_forking = 1;
    if (t->buf >= 0) {
        drop_buffer(t);
        if (take_buffer(t) != 0)
            t->state = LAPSE_T_OFF;
    }
    g_fork_tsc = lapse_ticks();
    g_fork_ptid = t->tid ? t->tid : lapse_gettid();
    struct lapse_msg m = {0};
    m.kind = LAPSE_MSG_FORK;
    m.pid = g_pid;
    m.tid = g_fork_ptid;
    m.b = g_fork_tsc;
    send_msg(&m, NULL, 0);
    t->in_slow--;
}

/* After a fork: the forking thread leaves its private buffer for the arena
 * again (handing over what the atfork handlers recorded, if anything), so a
 * process killed soon after still has its events where the recorder finds them. */
NOINSTR static void back_to_arena(struct lapse_tls *t)
{
    if (t->state != LAPSE_T_ACTIVE || t->buf >= 0 || !g_arena)
        return;
    t->in_slow++;
    if (t->base && t->cur > t->base) {
        flush_own(t);
    } else {
        t->base = t->cur = t->end = NULL;
        if (take_buffer(t) != 0)
            t->state = LAPSE_T_OFF;
    }
    t->in_slow--;
}

NOINSTR static void after_fork_parent(void)
{
    g_forking = 0;
    if (g_inited == 1)
        back_to_arena(&lapse_t);
}

/* The child: only the forking thread exists. Its buffer was flushed just
 * before fork, so it starts empty; the recorder gives it the parent's stack. */
NOINSTR static void after_fork_child(void)
{
    struct lapse_tls *self = &lapse_t;
    if (g_inited != 1)
        return;
    uint32_t ppid = g_pid;
    g_pid = (uint32_t)getpid();
    for (int i = 0; i < LAPSE_MAX_THREADS; i++) {
        struct lapse_tls *t = g_threads[i];
        if (t && t != self)
            g_threads[i] = NULL; /* their memory stays: those threads are gone */
    }
    self->tid = lapse_gettid();
    self->sent = 0;
    self->stalled = 0;
    if (self->base)
        self->cur = self->base;
    struct lapse_msg m = {0};
    m.kind = LAPSE_MSG_CHILD;
    m.pid = g_pid;
    m.tid = self->tid;
    m.b = g_fork_tsc;
    m.c = ppid;
    m.d = g_fork_ptid;
    send_msg(&m, NULL, 0);
    /* the parent's arena is the parent's: this process gets its own */
    if (g_arena)
        munmap(g_arena, g_arena_bytes);
    arena_create();
    g_forking = 0;
    back_to_arena(self);
}

NOINSTR void lapse_before_exec(void)
{
    if (g_inited != 1 || (uint32_t)getpid() != g_pid)
        return; /* not started, or a vfork child sharing the parent's memory */
    flush_all();
    struct lapse_msg m = {0};
    m.kind = LAPSE_MSG_EXEC;
    m.pid = g_pid;
    m.tid = lapse_gettid();
    m.b = lapse_ticks();
    send_msg(&m, NULL, 0);
}

/* Fatal signal: hand over everything, then let the original disposition act. */
NOINSTR static void on_signal(int sig)
{
    int saved = errno;
    if ((uint32_t)getpid() == g_pid)
        flush_all();
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

NOINSTR static void connect_recorder(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    struct sockaddr_un addr = {0};
    addr.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof addr.sun_path) {
        close(fd);
        return;
    }
    strcpy(addr.sun_path, path);
    /* Room for many buffers in flight, so the probe path rarely waits for the
     * recorder: FORCE works with CAP_NET_ADMIN, else net.core.wmem_max caps it. */
    int sndbuf = 8 << 20;
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof sndbuf) != 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        close(fd);
        return;
    }
    /* Keep out of the low descriptor numbers programs dup2 onto or close. */
    int high = fcntl(fd, F_DUPFD_CLOEXEC, 900);
    if (high >= 0) {
        close(fd);
        fd = high;
    }
    g_fd = fd;
}

NOINSTR static void lapse_init(void)
{
    int expected = 0;
    if (!__atomic_compare_exchange_n(&g_inited, &expected, 2, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return; /* done or under way */
    const char *path = getenv("LAPSE_SOCKET");
    if (!path || !*path)
        return;
    connect_recorder(path);
    if (g_fd < 0 && !getenv("LAPSE_SPILL"))
        return;
    g_pid = (uint32_t)getpid();
    g_no_arena = getenv("LAPSE_NO_ARENA") != NULL;
    arena_create();
    const char *flush = getenv("LAPSE_FLUSH_TICKS");
    if (flush && *flush) {
        char *endp = NULL;
        unsigned long long v = strtoull(flush, &endp, 10);
        if (endp && *endp == 0 && v > 0)
            g_flush_ticks = v;
    }
    if (pthread_key_create(&g_key, thread_done) != 0)
        return;
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    install_handlers();
    __atomic_store_n(&g_inited, 1, __ATOMIC_RELEASE);
    if (getenv("LAPSE_CALIBRATE")) {
        /* only the first process measures; its children inherit the value */
        unsetenv("LAPSE_CALIBRATE");
        struct lapse_tls *t = &lapse_t;
        uint32_t in_slow = t->in_slow; /* we may be inside the first probe */
        t->in_slow = 0;
        g_probe_cost = lapse_measure_probe_cost();
        t->in_slow = in_slow;
        flush_own(t);
        t->discard = 0;
        t->sent = 0;
        t->stalled = 0;
    }
    struct lapse_msg m = {0};
    m.kind = LAPSE_MSG_HELLO;
    m.pid = g_pid;
    m.tid = lapse_gettid();
    m.a = g_probe_cost;
    m.b = lapse_ticks();
    m.c = (uint32_t)getppid();
    send_msg(&m, NULL, 0);
}

__attribute__((constructor(101), no_instrument_function)) static void lapse_ctor(void)
{
    if (g_inited == 0)
        lapse_init();
}

/* exit(): runs after the program's own atexit handlers and destructors. */
__attribute__((destructor(101), no_instrument_function)) static void lapse_dtor(void)
{
    if (g_inited == 1 && (uint32_t)getpid() == g_pid)
        flush_all();
}
