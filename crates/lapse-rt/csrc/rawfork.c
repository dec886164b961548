/* rawfork.c - forks that do not go through fork(): syscall(SYS_fork) (and
 * SYS_clone, SYS_clone3 without CLONE_VM and without a new stack), glibc's
 * _Fork(), and clone() without CLONE_VM.
 *
 * fork() runs the runtime's pthread_atfork handlers (lifecycle.c): the
 * forking thread's buffer is handed over, the child gets a connection and
 * an arena of its own. These ways of forking run no handlers, so parent and
 * child would go on writing into the same shared arena buffers: the child's
 * calls taken for the parent's, the parent's lost. Each is wrapped here to
 * run the same handlers around it.
 *
 * Every other syscall() goes to the C library's own, looked up once at
 * start-up (its exact code matters to programs that start a thread on a
 * stack of their own with SYS_clone); before that, this file makes it with
 * its own `syscall` instruction and the C library's errno convention. */
#define _GNU_SOURCE
#include "rt.h"

#include <dlfcn.h>
#include <errno.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <sys/types.h>

#define EXPORT __attribute__((no_instrument_function, visibility("default")))


/* The C library's convention: -1 and errno for -4095..-1. */
NOINSTR static long with_errno(long ret)
{
    if ((unsigned long)ret > -4096UL) {
        errno = (int)-ret;
        return -1;
    }
    return ret;
}

/* True when the syscall makes a new process that goes on from here on a
 * copy of this stack (the only kind whose child can run the handlers). */
NOINSTR static int forks_here(long nr, long a, long b)
{
    if (nr == SYS_fork)
        return 1;
    if (nr == SYS_clone) /* (flags, new stack, ...) */
        return !((unsigned long)a & CLONE_VM) && b == 0;
    if (nr == SYS_clone3 && a) {
        const struct clone_args *args = (const struct clone_args *)a;
        return !(args->flags & CLONE_VM) && args->stack == 0;
    }
    return 0;
}

typedef long (*syscall_fn)(long, ...);
static syscall_fn g_real_syscall;

__attribute__((constructor(101), no_instrument_function)) static void rawfork_ctor(void)
{
    g_real_syscall = (syscall_fn)dlsym(RTLD_NEXT, "syscall");
}

EXPORT long syscall(long nr, ...)
{
    va_list ap;
    va_start(ap, nr);
    long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
    long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
    va_end(ap);
    if (!forks_here(nr, a, b)) {
        syscall_fn real = g_real_syscall;
        return real ? real(nr, a, b, c, d, e, f) : with_errno(lapse_raw_syscall(nr, a, b, c, d, e, f));
    }
    lapse_before_fork();
    long ret = lapse_raw_syscall(nr, a, b, c, d, e, f);
    if (ret == 0)
        lapse_after_fork_child();
    else
        lapse_after_fork_parent();
    return with_errno(ret);
}

typedef pid_t (*fork_fn)(void);

EXPORT pid_t _Fork(void)
{
    static fork_fn real;
    if (!real)
        real = (fork_fn)dlsym(RTLD_NEXT, "_Fork");
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    lapse_before_fork();
    pid_t pid = real();
    if (pid == 0)
        lapse_after_fork_child();
    else
        lapse_after_fork_parent();
    return pid;
}

typedef int (*clone_fn)(int (*)(void *), void *, int, void *, ...);

/* What the child of a wrapped clone() runs first: the handlers, then the
 * program's function (the struct is on the parent's stack, which the child
 * has a copy of). */
struct clone_start {
    int (*fn)(void *);
    void *arg;
};

NOINSTR static int clone_child(void *p)
{
    struct clone_start *s = p;
    lapse_after_fork_child();
    return s->fn(s->arg);
}

EXPORT int clone(int (*fn)(void *), void *stack, int flags, void *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    pid_t *ptid = va_arg(ap, pid_t *);
    void *tls = va_arg(ap, void *);
    pid_t *ctid = va_arg(ap, pid_t *);
    va_end(ap);
    static clone_fn real;
    if (!real)
        real = (clone_fn)dlsym(RTLD_NEXT, "clone");
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    if (flags & CLONE_VM) /* a thread (or vfork-like): nothing is copied */
        return real(fn, stack, flags, arg, ptid, tls, ctid);
    struct clone_start start = {fn, arg};
    lapse_before_fork();
    int pid = real(clone_child, stack, flags, &start, ptid, tls, ctid);
    lapse_after_fork_parent();
    return pid;
}
