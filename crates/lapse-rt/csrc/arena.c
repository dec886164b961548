/* arena.c - the buffer arena shared with the recorder (layout in lapse_rt.h).
 *
 * Events travel through the arena: a thread fills an arena buffer in place
 * and hands it over with a 48-byte SHM_EVENTS datagram, so no event is copied
 * through the kernel; while the recorder is awake (it says so in the arena's
 * `reading`), by the slot's state alone, without the datagram and the system
 * calls that cost the thread 1.5 us a buffer (hand_over_quietly). When the
 * arena has no free buffer and the recorder has
 * none to give back (many threads each holding one), a thread uses a private
 * buffer sent as an EVENTS datagram (threads.c), as it also does while
 * forking. If the recorder goes away, the arena buffers it had not freed go
 * to the spill file, oldest first.
 *
 * A process can lose its connection while the recorder lives: it closed
 * every descriptor and cannot open another (RLIMIT_NOFILE), or a seccomp
 * filter forbids sendmsg and socket. The recorder then keeps the arena and
 * looks at it every few milliseconds, stamping `heartbeat`; while the stamp
 * is recent, buffers handed over stay QUEUED in the arena for it (no
 * descriptor needed), and events that find no room anywhere are counted in
 * `undelivered`. */
#define _GNU_SOURCE
#include "rt.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct lapse_arena *g_arena; /* NULL: private buffers only */
static void *g_arena_map;    /* the mapping g_arena lies in (aligned inside it) */
/* The buffers of g_arena this process has claimed at least once (their
 * pages are mapped), and the arena the bits are about. */
static uint64_t g_used[(LAPSE_ARENA_MAX_BUFS + 63) / 64];
static const struct lapse_arena *g_used_of;
static size_t g_arena_map_bytes;
int g_no_arena;              /* LAPSE_NO_ARENA: always private buffers */
static int g_spill_lock;

/* The buffers this process image's arenas have (LAPSE_BUFFERS, read once:
 * a reconnection's arena is as big as the first). */
static uint32_t g_nbufs;
#define ARENA_BYTES (LAPSE_ARENA_HEAD + (size_t)g_nbufs * BUF_BYTES)
_Static_assert(LAPSE_ARENA_HEAD % BUF_BYTES == 0, "arena buffers must stay aligned");

/* LAPSE_BUFFERS, or the default when unset or out of range. */
NOINSTR static uint32_t arena_bufs(void)
{
    const char *v = lapse_env(LAPSE_ENV_BUFFERS);
    uint64_t n = 0;
    for (; v && *v >= '0' && *v <= '9' && n <= LAPSE_ARENA_MAX_BUFS; v++)
        n = n * 10 + (uint64_t)(*v - '0');
    return v && !*v && n >= 1 && n <= LAPSE_ARENA_MAX_BUFS ? (uint32_t)n : LAPSE_ARENA_BUFS;
}

NOINSTR static struct lapse_event *arena_buf(struct lapse_arena *a, int i)
{
    return (struct lapse_event *)((char *)a + LAPSE_ARENA_HEAD + (size_t)i * BUF_BYTES);
}

/* Maps `fd` (ARENA_BYTES) at a BUF_BYTES-aligned address, so that every
 * buffer is aligned as the probe's guard test needs. */
NOINSTR static void *map_aligned(int fd)
{
    size_t span = ARENA_BYTES + BUF_BYTES;
    char *res = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (res == MAP_FAILED)
        return NULL;
    char *at = (char *)(((uintptr_t)res + BUF_BYTES - 1) & ~(uintptr_t)(BUF_BYTES - 1));
    void *mem = mmap(at, ARENA_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    if (mem == MAP_FAILED) {
        munmap(res, span);
        return NULL;
    }
    g_arena_map = res;
    g_arena_map_bytes = span;
    return mem;
}

/* Creates this process image's arena and passes its memfd to the recorder.
 * Leaves g_arena NULL (private buffers) if anything fails. */
NOINSTR void lapse_arena_create(void)
{
    /* (after a reconnection, threads may still be filling buffers of the
     * old arena: it stays mapped, and they send those as copies) */
    g_arena = NULL;
    g_arena_map = NULL;
    if (g_fd < 0 || g_no_arena)
        return;
    if (!g_nbufs)
        g_nbufs = arena_bufs();
    int fd = (int)syscall(SYS_memfd_create, "lapse-arena", 1u /* MFD_CLOEXEC */);
    if (fd < 0)
        return;
    void *mem = NULL;
    if (ftruncate(fd, (off_t)ARENA_BYTES) == 0)
        mem = map_aligned(fd);
    if (!mem) {
        close(fd);
        return;
    }
    struct lapse_arena *a = mem;
    a->magic = LAPSE_ARENA_MAGIC;
    a->nbufs = g_nbufs;
    struct lapse_msg m =
        lapse_msg_arena(g_pid, lapse_gettid(), ARENA_BYTES, g_nbufs, LAPSE_BUF_EVENTS);
    struct iovec iov = {&m, sizeof m};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    __builtin_memset(&ctl, 0, sizeof ctl);
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl.buf;
    mh.msg_controllen = sizeof ctl.buf;
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    __builtin_memcpy(CMSG_DATA(c), &fd, sizeof fd);
    int sent = lapse_try_send(&mh, 1) == SEND_OK;
    close(fd); /* the recorder has its own copy now (the number is ours: just made) */
    if (!sent) {
        lapse_arena_forget();
        return;
    }
    for (size_t i = 0; i < sizeof g_used / sizeof g_used[0]; i++)
        __atomic_store_n(&g_used[i], 0, __ATOMIC_RELAXED);
    __atomic_store_n(&g_used_of, a, __ATOMIC_RELEASE);
    g_arena = a;
}

NOINSTR int lapse_arena_first_use(const struct lapse_arena *a, int i)
{
    if (i < 0 || (uint32_t)i >= g_nbufs)
        return 1;
    if (__atomic_load_n(&g_used_of, __ATOMIC_ACQUIRE) != a)
        return 1; /* (an arena from before a reconnection, or a fork's) */
    uint64_t bit = 1ull << (i % 64);
    return !(__atomic_fetch_or(&g_used[i / 64], bit, __ATOMIC_RELAXED) & bit);
}

NOINSTR void lapse_arena_forget(void)
{
    if (g_arena_map)
        munmap(g_arena_map, g_arena_map_bytes);
    g_arena_map = NULL;
    g_arena = NULL;
    __atomic_store_n(&g_used_of, NULL, __ATOMIC_RELEASE);
}

/* Handed over and not freed by the recorder yet (a quiet buffer it took
 * too: if it went away while reading one, whatever it wrote of it is told
 * apart by the events' indices). */
NOINSTR static int slot_is_queued(uint32_t state)
{
    return state == LAPSE_SLOT_QUEUED || state == LAPSE_SLOT_QUIET || state == LAPSE_SLOT_TAKEN;
}

/* How recent the recorder's heartbeat must be for buffers to wait in an
 * arena without a connection. (The recorder stamps it every 20 ms at most,
 * and sooner while buffers come.) */
#define HEARTBEAT_NS (1000ull * 1000 * 1000)

/* The recorder reads arena `a` without a connection (see the top): its
 * heartbeat is recent, or the connection was lost on this side just now (it
 * has not seen the connection close yet). */
NOINSTR static int read_without_connection(const struct lapse_arena *a)
{
    if (!a)
        return 0;
    uint64_t since = __atomic_load_n(&a->heartbeat, __ATOMIC_ACQUIRE);
    if (a == g_arena && lapse_cut_here_ns() > since)
        since = lapse_cut_here_ns();
    return since && lapse_monotonic_ns() < since + HEARTBEAT_NS;
}

NOINSTR void lapse_arena_note_cut(int err)
{
    struct lapse_arena *a = g_arena;
    if (a)
        __atomic_store_n(&a->cut_errno, err, __ATOMIC_RELAXED);
}

NOINSTR void lapse_arena_note_delivery(struct lapse_tls *t, uint32_t count, int ok)
{
    if (ok) {
        /* (this buffer's first index leaves the gap that counts them) */
        if (t->undelivered && t->undelivered_in)
            __atomic_sub_fetch(&t->undelivered_in->undelivered, t->undelivered, __ATOMIC_RELAXED);
        t->undelivered = 0;
        return;
    }
    struct lapse_arena *a = g_arena;
    if (!a)
        return;
    if (t->undelivered_in != a) {
        /* (a new arena after a reconnection: the old one's count stays) */
        t->undelivered = 0;
        t->undelivered_in = a;
    }
    t->undelivered += count;
    __atomic_add_fetch(&a->undelivered, count, __ATOMIC_RELAXED);
}

/* The recorder is gone: the buffers it had not freed go to the spill file,
 * oldest first (so each thread's events stay in order), one thread at a time.
 * Those the spill cannot take stay where they are. */
NOINSTR static void spill_queued(void)
{
    struct lapse_arena *a = g_arena;
    if (!a)
        return;
    /* Another thread spills: let it run (it may be waiting for a CPU that
     * spinners would take; under load that held every thread here for
     * minutes). Given up after a while: the spiller may be this thread,
     * interrupted by a signal whose handler came here. */
    for (long spins = 0; __atomic_exchange_n(&g_spill_lock, 1, __ATOMIC_ACQUIRE); spins++) {
        if (spins > (1l << 14))
            return;
        if (spins > 64)
            sched_yield();
    }
    for (;;) {
        int best = -1;
        uint64_t best_seq = ~0ull;
        uint32_t best_state = 0;
        for (int i = 0; (uint32_t)i < g_nbufs; i++) {
            uint32_t st = __atomic_load_n(&a->slot[i].state, __ATOMIC_ACQUIRE);
            if (slot_is_queued(st) && a->slot[i].seq < best_seq) {
                best = i;
                best_seq = a->slot[i].seq;
                best_state = st;
            }
        }
        if (best < 0)
            break;
        struct lapse_slot *sl = &a->slot[best];
        if (!__atomic_compare_exchange_n(&sl->state, &best_state, LAPSE_SLOT_SPILLING, 0,
                                         __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            continue;
        uint32_t count = sl->count <= LAPSE_BUF_EVENTS ? sl->count : LAPSE_BUF_EVENTS;
        struct lapse_msg m = lapse_msg_events(g_pid, sl->tid, sl->first, sl->stalled, count,
                                              sl->flags & LAPSE_FLAG_DISCARD);
        struct iovec iov[2] = {{&m, sizeof m}, {arena_buf(a, best), count * sizeof(struct lapse_event)}};
        if (lapse_spill(iov, 2) != 0) {
            __atomic_store_n(&sl->state, best_state, __ATOMIC_RELEASE);
            break;
        }
        __atomic_store_n(&sl->state, LAPSE_SLOT_FREE, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&g_spill_lock, 0, __ATOMIC_RELEASE);
}

NOINSTR void lapse_arena_settle(void)
{
    struct lapse_arena *a = g_arena;
    if (a && lapse_recorder_gone() && !read_without_connection(a))
        spill_queued();
}

/* From t0 to t1, at least 1 ns (every round counts). */
NOINSTR static uint64_t elapsed_ns(const struct timespec *t0, const struct timespec *t1)
{
    return (uint64_t)(t1->tv_sec - t0->tv_sec) * 1000000000ull + (uint64_t)(t1->tv_nsec - t0->tv_nsec) +
           1;
}

/* How long a thread waits, in all, for the recorder to free an arena buffer
 * before it fills a private buffer instead (sent as a datagram, which blocks
 * only while the socket is full, and then for at most SEND_TIMEOUT_S): the
 * program is never held indefinitely, however many threads want a buffer. */
#define CLAIM_WAIT_NS (2 * 1000 * 1000)
/* ... and while the recorder reads the arena without a connection (nothing
 * wakes it: it looks every millisecond), before the private buffer, which
 * could only go to the spill. */
#define CLAIM_WAIT_CUT_NS (20 * 1000 * 1000)

/* A free arena buffer for thread t, waiting a little while the recorder
 * catches up; -1 when none comes (no arena, forking, every buffer held by a
 * thread, or the wait ran out): the caller then uses a private buffer. */
NOINSTR int lapse_arena_claim(struct lapse_tls *t, struct lapse_buf *b)
{
    uint64_t waited_ns = 0;
    for (;;) {
        struct lapse_arena *a = g_arena; /* (a reconnection replaces it) */
        if (!a || g_forking)
            return -1;
        uint32_t gen = __atomic_load_n(&a->gen, __ATOMIC_ACQUIRE);
        int queued = 0;
        /* lowest first: the buffers in use stay few and warm, and the
         * arena's memory grows only while the recorder is behind */
        for (uint32_t i = 0; i < g_nbufs; i++) {
            uint32_t st = __atomic_load_n(&a->slot[i].state, __ATOMIC_ACQUIRE);
            if (slot_is_queued(st))
                queued++;
            if (st != LAPSE_SLOT_FREE)
                continue;
            /* (raised before the claim, so no buffer being filled ever lies
             * at or above it; a failed claim leaves it one too high) */
            uint32_t high = __atomic_load_n(&a->high, __ATOMIC_RELAXED);
            while (high < i + 1 && !__atomic_compare_exchange_n(&a->high, &high, i + 1, 1,
                                                               __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
                ;
            uint32_t expected = LAPSE_SLOT_FREE;
            if (__atomic_compare_exchange_n(&a->slot[i].state, &expected, LAPSE_SLOT_FILLING, 0,
                                            __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
                struct lapse_slot *sl = &a->slot[i];
                sl->tid = t->tid;
                sl->first = t->next;
                sl->flags = t->discard ? LAPSE_FLAG_DISCARD : 0;
                sl->claimed = lapse_ticks();
                b->base = arena_buf(a, (int)i);
                b->arena = (int32_t)i;
                b->owner = a;
                b->claimed = sl->claimed;
                return 0;
            }
        }
        if (!queued || waited_ns >= (g_fd < 0 && read_without_connection(a) ? CLAIM_WAIT_CUT_NS
                                                                          : CLAIM_WAIT_NS))
            return -1;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (g_fd < 0 && !read_without_connection(a)) {
            /* (counts towards the wait: another thread may hold the spill) */
            spill_queued();
            clock_gettime(CLOCK_MONOTONIC, &t1);
            waited_ns += elapsed_ns(&t0, &t1);
            continue;
        }
        /* wait for the recorder to free a buffer; it bumps gen and wakes one */
        __atomic_add_fetch(&a->waiters, 1, __ATOMIC_ACQ_REL);
        struct timespec ts = {0, CLAIM_WAIT_NS / 4};
        syscall(SYS_futex, &a->gen, FUTEX_WAIT, gen, &ts, NULL, 0);
        __atomic_sub_fetch(&a->waiters, 1, __ATOMIC_ACQ_REL);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        waited_ns += elapsed_ns(&t0, &t1);
        if (g_fd >= 0 && gen == __atomic_load_n(&a->gen, __ATOMIC_ACQUIRE) &&
            lapse_recorder_gone())
            lapse_disconnect();
    }
}

/* What the recorder needs to read a buffer, in its slot; the hand-over's
 * number in the arena's order last. */
NOINSTR static void describe(struct lapse_arena *a, struct lapse_slot *sl, struct lapse_tls *t,
                             struct lapse_buf *b, uint32_t count)
{
    sl->count = count;
    sl->first = b->first;
    sl->stalled = t->stalled;
    sl->flags = t->discard ? LAPSE_FLAG_DISCARD : 0;
    sl->seq = __atomic_fetch_add(&a->seq, 1, __ATOMIC_ACQ_REL);
}

/* Hands a described buffer over by its state alone, if the recorder is
 * reading the arena: 1 if done. The recorder clears `reading` before it
 * goes to sleep and then looks at every slot once more; with a full fence
 * between the store and the load on both sides, either it sees this QUIET
 * state or this sees `reading` cleared and takes the buffer back (unless the
 * recorder took it first) to send its datagram, which wakes the recorder.
 * Datagrams say how many buffers were handed over before them (arena_seq),
 * so the recorder reads both in the order they were sent. Cost: a load, a
 * store, a fence; no system call (the datagram's sendmsg and the fstats of
 * the connection checks took 1.5 us a buffer on the 2-core VM, 3.3 us when
 * the sendmsg woke the recorder). */
NOINSTR static int hand_over_quietly(struct lapse_arena *a, struct lapse_slot *sl)
{
    if (!__atomic_load_n(&a->reading, __ATOMIC_RELAXED) || g_fd < 0)
        return 0;
    __atomic_store_n(&sl->state, LAPSE_SLOT_QUIET, __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&a->reading, __ATOMIC_RELAXED))
        return 1;
    uint32_t quiet = LAPSE_SLOT_QUIET;
    return !__atomic_compare_exchange_n(&sl->state, &quiet, LAPSE_SLOT_FILLING, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

NOINSTR int lapse_arena_hand_over(struct lapse_tls *t, struct lapse_buf *b, uint32_t count)
{
    struct lapse_arena *a = b->owner;
    struct lapse_slot *sl = &a->slot[b->arena];
    if (a == g_arena) {
        describe(a, sl, t, b, count);
        if (hand_over_quietly(a, sl))
            return 1;
    }
    for (int attempt = 0;; attempt++) {
        lapse_conn_check(); /* (a reconnection here replaces g_arena) */
        if (a != g_arena || attempt == 2) {
            /* An arena from before a reconnection: the recorder let it go
             * with the old connection (reading what was written then). */
            struct lapse_msg m =
                lapse_msg_events(g_pid, t->tid, b->first, t->stalled, count, t->discard);
            int rc = lapse_send_msg(&m, b->base, count * sizeof(struct lapse_event));
            if (rc == SEND_LOST && read_without_connection(a)) {
                /* (the recorder still reads that arena: it waits there) */
                describe(a, sl, t, b, count);
                __atomic_store_n(&sl->state, LAPSE_SLOT_QUEUED, __ATOMIC_RELEASE);
                return 1;
            }
            __atomic_store_n(&sl->state, LAPSE_SLOT_FREE, __ATOMIC_RELEASE);
            return rc != SEND_LOST && rc != SEND_TIMEOUT;
        }
        describe(a, sl, t, b, count);
        __atomic_store_n(&sl->state, LAPSE_SLOT_QUEUED, __ATOMIC_RELEASE);
        struct lapse_msg m = lapse_msg_shm_events(g_pid, t->tid, b->first, t->stalled, count,
                                                  (uint32_t)b->arena, t->discard);
        struct iovec iov = {&m, sizeof m};
        struct msghdr mh = {0};
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        int rc = lapse_try_send(&mh, 1);
        if (rc == SEND_OK)
            return 1;
        if (rc == SEND_TIMEOUT) {
            /* the recorder is stuck: these events are lost (the numbering
             * shows the gap), the buffer is free again */
            __atomic_store_n(&sl->state, LAPSE_SLOT_FREE, __ATOMIC_RELEASE);
            return 0;
        }
        if (rc != SEND_MOVED) {
            /* This buffer and any the recorder left go to the spill, unless
             * the recorder reads the arena without a connection; what the
             * spill cannot take waits in the arena (it reads that at the
             * process's end, if not before). */
            if (!read_without_connection(a))
                spill_queued();
            return 1;
        }
        /* the program took the connection over in between: again, as a
         * buffer of an arena from before the reconnection */
        __atomic_store_n(&sl->state, LAPSE_SLOT_FILLING, __ATOMIC_RELEASE);
    }
}

NOINSTR void lapse_arena_release(struct lapse_buf *b)
{
    if (b->arena >= 0 && b->owner)
        __atomic_store_n(&b->owner->slot[b->arena].state, LAPSE_SLOT_FREE, __ATOMIC_RELEASE);
}
