/* transport.c - the connection to the recorder and the spill file.
 *
 * One SOCK_SEQPACKET connection per process image to the socket named by
 * LAPSE_SOCKET; every datagram is a struct lapse_msg (and, for EVENTS, the
 * events). Datagrams are atomic, so threads share the connection without a
 * lock, and a fork child keeps using the inherited one (the order parent
 * FORK -> child CHILD is then the order the recorder reads).
 *
 * The descriptors are the program's to close or dup2 over: before each use
 * the runtime checks (fstat: device and inode) that a descriptor number still
 * holds what it opened there. When it does not, the number is the program's
 * now and is never written to or closed; the runtime connects again (and
 * makes a new arena, arena.c) or reopens the spill file.
 *
 * If the recorder goes away, datagrams are appended to LAPSE_SPILL (a file
 * next to the output, created 0600 and never through a symlink) instead,
 * each as a u32 length and the datagram. A call-heavy program spills about
 * 170 MB/s, so the file stops growing at LAPSE_SPILL_MAX bytes (default
 * SPILL_MAX_DEFAULT): later datagrams are dropped, and lapse recover counts
 * the events it can tell are missing as lost. */
#define _GNU_SOURCE
#include "rt.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* The spill file's default size limit: 2 GiB, some 12 s of the busiest
 * program's events. */
#define SPILL_MAX_DEFAULT (2ULL << 30)

/* Reconnections per process image; after that the spill file takes over. */
#define MAX_RECONNECTS 16
/* A send waits at most this long for room in the socket (the recorder is
 * alive but not reading): the program is never held indefinitely. */
#define SEND_TIMEOUT_S 2
/* ... and again, up to this many waits in all, while the recorder reads
 * (the arena's `received` moved during the wait): it is behind, not stuck.
 * Tens of thousands of threads ending at once fill the socket for longer
 * than one wait while the recorder works through them; their last events
 * were lost before. */
#define SEND_PATIENCE 15

struct owned_fd {
    int fd;
    dev_t dev;
    ino_t ino;
};

int g_fd = -1; /* connection to the recorder (owned, see lapse_conn_check) */
static struct owned_fd g_conn = {-1, 0, 0};
static struct owned_fd g_spill = {-1, 0, 0};
static char g_path[108];        /* the recorder's socket */
static int g_recorder_gone;     /* it closed the connection: do not reconnect */
static int g_reconnects;
static int g_reconnecting;      /* lock word */
static int g_stuck;             /* a send timed out: do not wait again until one goes */
/* CLOCK_MONOTONIC ns when the connection was lost on this side (the program
 * closed or took the descriptor, or a seccomp filter failed the send) rather
 * than by the recorder leaving: 0 if it was not. */
static uint64_t g_cut_here_ns;

NOINSTR uint64_t lapse_monotonic_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
}

NOINSTR uint64_t lapse_cut_here_ns(void)
{
    return __atomic_load_n(&g_cut_here_ns, __ATOMIC_RELAXED);
}

NOINSTR static void cut_here(void)
{
    if (!__atomic_load_n(&g_cut_here_ns, __ATOMIC_RELAXED))
        __atomic_store_n(&g_cut_here_ns, lapse_monotonic_ns(), __ATOMIC_RELAXED);
}

NOINSTR static int still_ours(const struct owned_fd *o)
{
    struct stat st;
    return o->fd >= 0 && fstat(o->fd, &st) == 0 && st.st_dev == o->dev && st.st_ino == o->ino;
}

NOINSTR static void own(struct owned_fd *o, int fd)
{
    struct stat st;
    o->fd = -1;
    if (fd >= 0 && fstat(fd, &st) == 0) {
        o->dev = st.st_dev;
        o->ino = st.st_ino;
        o->fd = fd;
    }
}

/* A descriptor the runtime just made, kept out of the numbers the program
 * uses (0-2 above all, which a program that closed them expects its next
 * open to get): moved up, else closed. -1 (errno set) when it cannot be. */
NOINSTR static int keep_high(int fd)
{
    if (fd < 0)
        return -1;
    int high = fcntl(fd, F_DUPFD_CLOEXEC, 900);
    if (high < 0 && fd < 3)
        high = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (high >= 0) {
        close(fd);
        return high;
    }
    if (fd >= 3)
        return fd;
    close(fd);
    errno = EMFILE;
    return -1;
}

/* ---- the spill file ---- */

NOINSTR static int open_spill(void)
{
    const char *path = lapse_env(LAPSE_ENV_SPILL);
    if (!path || !*path)
        return -1;
    /* Created by the first writer, 0600; never through a symlink planted at
     * that name (O_EXCL, then O_NOFOLLOW without O_CREAT). */
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 && errno == EEXIST) {
        /* Another process of this recording made it first (the recorder
         * removed any older one): appended to only if it is a regular file
         * of ours that no one else may write, never to another user's. */
        fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
        struct stat st;
        if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
                        (st.st_mode & 077) != 0)) {
            close(fd);
            fd = -1;
            errno = EPERM;
        }
    }
    fd = keep_high(fd);
    if (fd < 0)
        lapse_arena_note_cut(errno);
    return fd;
}

/* The spill's size limit: LAPSE_SPILL_MAX (decimal bytes) when set and
 * valid, else the default. (Parsed by hand: this can run in a signal
 * handler.) */
NOINSTR static uint64_t spill_max(void)
{
    const char *v = lapse_env(LAPSE_ENV_SPILL_MAX);
    uint64_t max = 0;
    for (; v && *v >= '0' && *v <= '9' && max < (1ULL << 56); v++)
        max = max * 10 + (uint64_t)(*v - '0');
    return max ? max : SPILL_MAX_DEFAULT;
}

/* Appends one datagram (length first) to the open spill: 0, or -1. */
NOINSTR static int append(const struct iovec *iov, int n)
{
    uint32_t len = 0;
    for (int i = 0; i < n; i++)
        len += (uint32_t)iov[i].iov_len;
    /* (O_APPEND from several processes: the limit holds to within one
     * datagram per writer) */
    struct stat st;
    if (fstat(g_spill.fd, &st) == 0 && (uint64_t)st.st_size + sizeof len + len > spill_max())
        return -1;
    struct iovec all[3] = {{&len, sizeof len}};
    for (int i = 0; i < n && i < 2; i++)
        all[i + 1] = iov[i];
    return writev(g_spill.fd, all, n + 1) == (ssize_t)(sizeof len + len) ? 0 : -1;
}

NOINSTR int lapse_spill(const struct iovec *iov, int n)
{
    if (!still_ours(&g_spill)) {
        /* (a descriptor the program took over is its own now: not closed) */
        int fd = open_spill();
        own(&g_spill, fd);
        if (g_spill.fd < 0) {
            if (fd >= 0)
                close(fd);
            return -1;
        }
        /* Which recording this process spills for, before anything else it
         * spills: lapse recover merges a spill only into its own recording
         * (a spill left by another one at the same path is refused). */
        uint64_t id = 0;
        for (const char *v = lapse_env(LAPSE_ENV_SESSION); v && *v >= '0' && *v <= '9'; v++)
            id = id * 10 + (uint64_t)(*v - '0');
        struct lapse_msg m = lapse_msg_session(g_pid, lapse_gettid(), id);
        struct iovec head = {&m, sizeof m};
        if (id && append(&head, 1) != 0)
            return -1;
    }
    return append(iov, n);
}

/* ---- the connection ---- */

NOINSTR static int dial(void)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        lapse_arena_note_cut(errno);
        return -1;
    }
    struct sockaddr_un addr = {0};
    addr.sun_family = AF_UNIX;
    memcpy(addr.sun_path, g_path, sizeof g_path);
    /* Room for many buffers in flight, so the probe path rarely waits for the
     * recorder: FORCE works with CAP_NET_ADMIN, else net.core.wmem_max caps it. */
    int sndbuf = 8 << 20;
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof sndbuf) != 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    struct timeval tv = {SEND_TIMEOUT_S, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        lapse_arena_note_cut(errno);
        close(fd);
        return -1;
    }
    /* Out of the low descriptor numbers programs use first. */
    fd = keep_high(fd);
    if (fd < 0)
        lapse_arena_note_cut(errno);
    return fd;
}

NOINSTR void lapse_connect(const char *path)
{
    if (strlen(path) >= sizeof g_path)
        return;
    memcpy(g_path, path, strlen(path) + 1);
    own(&g_conn, dial());
    g_fd = g_conn.fd;
}

/* Our connection, still ours, or a new one: 0, else -1 (spill). */
NOINSTR int lapse_conn_check(void)
{
    if (still_ours(&g_conn))
        return 0;
    if (g_conn.fd >= 0)
        cut_here(); /* (the program's own descriptor now) */
    g_conn.fd = g_fd = -1; /* gone, or the program's own descriptor now */
    if (g_recorder_gone || !g_path[0] || g_reconnects >= MAX_RECONNECTS)
        return -1;
    /* One thread reconnects; the others wait for it (briefly). */
    for (int spins = 0; __atomic_exchange_n(&g_reconnecting, 1, __ATOMIC_ACQUIRE); spins++) {
        if (spins > 10000)
            return -1;
        sched_yield();
    }
    int ok = still_ours(&g_conn);
    if (!ok && g_reconnects < MAX_RECONNECTS) {
        g_reconnects++;
        own(&g_conn, dial());
        g_fd = g_conn.fd;
        ok = g_fd >= 0;
        if (ok) {
            g_cut_here_ns = 0;
            lapse_arena_create(); /* the recorder let the old one go with the connection */
        }
        else
            g_recorder_gone = 1; /* (it is not listening any more): spill */
    }
    __atomic_store_n(&g_reconnecting, 0, __ATOMIC_RELEASE);
    return ok ? 0 : -1;
}

/* The recorder ended the connection: close it (checked ours just before). */
NOINSTR static void recorder_left(void)
{
    int fd = g_conn.fd;
    g_recorder_gone = 1;
    g_conn.fd = g_fd = -1;
    if (fd >= 0)
        close(fd);
}

/* A datagram says how many buffers of the arena were handed over before it
 * (lapse_rt.h: arena_seq), read as it goes (after every hand-over this
 * thread made before). */
NOINSTR static void stamp(struct msghdr *mh)
{
    struct lapse_msg *m = mh->msg_iov[0].iov_base;
    struct lapse_arena *a = g_arena;
    m->arena_seq = a ? __atomic_load_n(&a->seq, __ATOMIC_ACQUIRE) : 0;
}

/* Datagrams the recorder has read from this process so far (0 without an
 * arena: then a wait that ran out is never taken for progress). */
NOINSTR static uint64_t received_so_far(void)
{
    struct lapse_arena *a = g_arena;
    return a ? __atomic_load_n(&a->received, __ATOMIC_ACQUIRE) : 0;
}

/* Sends one datagram; blocks while the recorder catches up (backpressure
 * keeps the recorder's memory bounded). A datagram that refers to the arena
 * of this connection (SHM_EVENTS, ARENA) must not go on another one: with
 * `same_conn`, a connection the program took over is SEND_MOVED, not
 * replaced. */
NOINSTR int lapse_try_send(struct msghdr *mh, int same_conn)
{
    if (same_conn && !still_ours(&g_conn)) {
        if (g_conn.fd >= 0)
            cut_here();
        g_conn.fd = g_fd = -1; /* (the program's now, if anything) */
        return g_recorder_gone ? SEND_GONE : SEND_MOVED;
    }
    if (!same_conn && lapse_conn_check() != 0)
        return SEND_GONE;
    if (g_stuck) {
        /* the last send timed out: only send when there is room now */
        struct pollfd p = {g_conn.fd, POLLOUT, 0};
        if (poll(&p, 1, 0) != 1 || !(p.revents & POLLOUT))
            return SEND_TIMEOUT;
    }
    stamp(mh);
    uint64_t seen = received_so_far();
    for (int waits = 1;;) {
        if (sendmsg(g_conn.fd, mh, MSG_NOSIGNAL) >= 0) {
            g_stuck = 0;
            return SEND_OK;
        }
        if (errno == EINTR)
            continue;
        if ((errno == EAGAIN || errno == EWOULDBLOCK) && waits < SEND_PATIENCE) {
            uint64_t now = received_so_far();
            if (now != seen) {
                seen = now;
                waits++;
                continue;
            }
        }
        break;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
        g_stuck = 1;
        return SEND_TIMEOUT;
    }
    if (errno == EBADF || errno == ENOTSOCK || !still_ours(&g_conn)) {
        /* the program closed it (or put its own file there) just now */
        cut_here();
        g_conn.fd = g_fd = -1;
        if (same_conn)
            return SEND_MOVED;
        if (lapse_conn_check() != 0)
            return SEND_GONE;
        stamp(mh); /* (for the new connection's arena) */
        return sendmsg(g_conn.fd, mh, MSG_NOSIGNAL) >= 0 ? SEND_OK : SEND_GONE;
    }
    if (errno != EPIPE && errno != ECONNRESET && errno != ENOTCONN) {
        /* refused on this side (a seccomp filter's EPERM): the recorder
         * lives, and reads the arena once it sees the connection close */
        lapse_arena_note_cut(errno);
        cut_here();
    }
    recorder_left();
    return SEND_GONE;
}

NOINSTR int lapse_send_msg(struct lapse_msg *m, const void *body, size_t body_len)
{
    struct iovec iov[2] = {{m, sizeof *m}, {(void *)body, body_len}};
    int n = body_len ? 2 : 1;
    struct msghdr mh = {0};
    mh.msg_iov = iov;
    mh.msg_iovlen = n;
    int rc = lapse_try_send(&mh, 0);
    if ((rc == SEND_GONE || rc == SEND_MOVED) && lapse_spill(iov, n) != 0)
        rc = SEND_LOST;
    /* (SEND_TIMEOUT: the recorder is alive but stuck; the events are lost,
     * and the numbering of the next ones shows it) */
    return rc;
}

NOINSTR int lapse_recorder_gone(void)
{
    if (lapse_conn_check() != 0)
        return 1;
    struct pollfd p = {g_conn.fd, POLLOUT, 0};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR));
}

NOINSTR void lapse_disconnect(void)
{
    if (still_ours(&g_conn))
        recorder_left();
    else
        g_recorder_gone = 1;
}

/* A fork child with --no-inherit, or a disabled image: let the inherited
 * connection go (our copy of it, if the number still holds it). */
NOINSTR void lapse_drop_connection(void)
{
    int fd = g_conn.fd;
    int ours = still_ours(&g_conn);
    g_conn.fd = g_fd = -1;
    g_recorder_gone = 1;
    if (ours)
        close(fd);
}

/* Descriptors are checked before use; this keeps a fork child's state
 * consistent (the lock word may have been held by a thread that is gone). */
NOINSTR void lapse_transport_after_fork(void)
{
    g_reconnecting = 0;
    g_reconnects = 0;
    g_cut_here_ns = 0;
}

/* Attach again (attach.c): a new recorder, a new count of reconnections. */
NOINSTR void lapse_transport_reattach(void)
{
    g_recorder_gone = 0;
    g_reconnects = 0;
    g_cut_here_ns = 0;
    g_stuck = 0;
}
