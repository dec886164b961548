/* transport.c - the connection to the recorder and the spill file.
 *
 * One SOCK_SEQPACKET connection per process image to the socket named by
 * LAPSE_SOCKET; every datagram is a struct lapse_msg (and, for EVENTS, the
 * events). Datagrams are atomic, so threads share the connection without a
 * lock, and a fork child keeps using the inherited one (the order parent
 * FORK -> child CHILD is then the order the recorder reads).
 *
 * If the recorder goes away, datagrams are appended to LAPSE_SPILL (a file
 * next to the output) instead, each as a u32 length and the datagram. */
#define _GNU_SOURCE
#include "rt.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

int g_fd = -1;              /* connection to the recorder */
static int g_spill_fd = -1; /* fallback when the recorder is gone */

NOINSTR void lapse_spill(const struct iovec *iov, int n)
{
    if (g_spill_fd < 0) {
        const char *path = getenv(LAPSE_ENV_SPILL);
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
NOINSTR int lapse_try_send(struct msghdr *mh)
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

NOINSTR void lapse_send_msg(struct lapse_msg *m, const void *body, size_t body_len)
{
    struct iovec iov[2] = {{m, sizeof *m}, {(void *)body, body_len}};
    int n = body_len ? 2 : 1;
    struct msghdr mh = {0};
    mh.msg_iov = iov;
    mh.msg_iovlen = n;
    if (lapse_try_send(&mh) != 0)
        lapse_spill(iov, n);
}

NOINSTR int lapse_recorder_gone(void)
{
    if (g_fd < 0)
        return 1;
    struct pollfd p = {g_fd, POLLOUT, 0};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR));
}

NOINSTR void lapse_disconnect(void)
{
    if (g_fd >= 0)
        close(g_fd);
    g_fd = -1;
}

NOINSTR void lapse_connect(const char *path)
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
