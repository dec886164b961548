/* filter.c - record-time filters (--filter, --exclude, --depth, --min-time):
 * which probes are kept, decided in the probe before it claims a slot, so
 * a call left out costs a table lookup and no event.
 *
 * The recorder matched the regexes against the executable's symbols and
 * wrote a table of address ranges (lapse_rt.h, struct lapse_filter_header);
 * the constructor loads it once per process image (lapse_filter_load, after
 * calibration, which must measure the kept path) into a private mapping,
 * with the load bias added. The probe path then only reads it.
 *
 * The decisions are inline in the probes (filter.h). The rules, per thread:
 * - an --exclude function's own entry and exit are dropped, nothing else:
 *   its callees are recorded under its caller (uftrace's -N), and its time
 *   stays in its caller's exclusive time. Stateless, so nothing to balance.
 * - with --filter, a thread records nothing until it enters a match; from
 *   there everything below it, until that match returns.
 * - with --depth N, at most N frames are kept on a thread's stack at once,
 *   counted from its outermost kept frame (the --filter match, if any).
 * The frames that count (the matches; every kept frame with --depth) are
 * on a small per-thread stack of (sp, fn); frames below the depth are
 * only counted (and where the outermost of them is). An exit closes the
 * innermost entry of its function; entries below the place of a new entry,
 * or of a longjmp's or a catch's target (lapse_filter_unwind, from the
 * unwind marker), are gone - the rule the recorder itself follows for dead
 * frames (threads.rs), so the filter stays balanced where the recorded
 * stack does.
 *
 * Cost of a probe with filters on (on top of the probe's own when kept):
 * one load of the table's bounds, a binary search of the table for
 * addresses inside them (one range for `--filter fib`), and a scan of at
 * most the --depth stack. Measured on calls.c (bench/instrument/filter.sh,
 * BENCHMARKS.md): a call left out (enter and exit) 7.4 ns with --exclude,
 * 8.2 ns with --depth, against 23.7 ns for a call recorded and 4.7 ns for
 * calling glibc's empty probe functions. No lock, no allocation, no system
 * call; a signal handler's probes nest on the same stack and leave it as
 * they found it. */
#define _GNU_SOURCE
/* The trampoline's fast hooks call lapse_min_time_exit (trampoline.c:
 * "Vector registers"): this file is built for the general registers only. */
#if defined(__x86_64__)
#pragma GCC target("general-regs-only")
#endif
#include "rt.h"

#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct lapse_filter g_filter;

/* ---- --min-time ----
 * A call that returns within min_ticks of its entry, with nothing kept
 * between its entry and its exit but the markers of calls dropped so, is
 * dropped: its entry's slot and those markers become one marker per
 * function with the number of calls dropped (coalesced, so a subtree of
 * short calls ends as a few markers), and the exit is never written. Its
 * time stays in its caller's. A call whose entry is in an earlier buffer
 * (handed over meanwhile) is kept: conservative, and rare.
 *
 * Signals: the slots are rewritten only after the cursor moved back in one
 * cmpxchg (which fails, and the call is kept, if a handler claimed a slot
 * since); they are marked unwritten first (stamp 0), so that a handler
 * that fills and hands the buffer over in between parks it (rt.h) rather
 * than sending what is being rewritten.
 *
 * Cost: on a dropped exit, a tick read, the look back at up to
 * LOOK_BACK + 1 slots and a few stores; no lock, allocation or system call. */
#define LOOK_BACK 4
#define COUNT_SHIFT 48
#define COUNT_MAX 0xffffu

/* cur from `from` to `to` unless a signal handler moved it meanwhile
 * (cmpxchg without lock: atomic against this thread's handlers). */
static inline NOINSTR int move_cursor(struct lapse_tls *t, struct lapse_event *from,
                                      struct lapse_event *to)
{
#if defined(__x86_64__)
    struct lapse_event *prev = from;
    __asm__ volatile("cmpxchgq %2, %1" : "+a"(prev), "+m"(t->cur) : "r"(to) : "memory", "cc");
    return prev == from;
#else
    return __atomic_compare_exchange_n(&t->cur, &from, to, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
#endif
}

static inline NOINSTR int is_drop_marker(const struct lapse_event *e, uint64_t claimed)
{
    return e->fn == LAPSE_MARK_DROPPED && (e->stamp >> 1) >= claimed;
}

/* A source of the markers to write: calls of f dropped, the first one's stamp. */
struct dropped {
    uintptr_t f;
    uint64_t count, stamp;
};

NOINSTR int lapse_min_time_exit(struct lapse_tls *t, uintptr_t fn)
{
    struct lapse_event *c = t->cur;
    uint64_t now = lapse_ticks();
    if (!c || ((uintptr_t)c & (BUF_BYTES - 1)) == 0 || lapse_in_guard(c) || now > t->deadline ||
        (fn >> COUNT_SHIFT) != 0 || t->state != LAPSE_T_ACTIVE)
        return 0; /* (the probe's own path: a hand-over, or set-up) */
    struct lapse_event *base = (struct lapse_event *)((uintptr_t)c & ~(uintptr_t)(BUF_BYTES - 1));
    uint64_t claimed = t->fill.claimed;
    struct lapse_event *p = c - 1;
    unsigned k = 0;
    while (p > base && k < LOOK_BACK && is_drop_marker(p, claimed)) {
        p--;
        k++;
    }
    uint64_t entered = p->stamp >> 1;
    if (p->fn != fn || (p->stamp & 1) || (p->sp & LAPSE_LEAF_BIT) || entered < claimed ||
        now - entered >= g_filter.min_ticks)
        return 0;
    /* The slots from `from` on become markers: a marker just before the
     * entry (its siblings dropped before it), the ones after it, this call. */
    struct lapse_event *from = p > base && is_drop_marker(p - 1, claimed) ? p - 1 : p;
    unsigned slots = (unsigned)(c - from);
    struct dropped src[LOOK_BACK + 2];
    unsigned m = 0;
    for (struct lapse_event *q = from; q < c; q++) {
        if (q == p)
            continue;
        src[m++] = (struct dropped){(uintptr_t)(q->sp & ((1ull << COUNT_SHIFT) - 1)),
                                    q->sp >> COUNT_SHIFT, q->stamp};
    }
    src[m++] = (struct dropped){fn, 1, p->stamp};
    struct lapse_event old[LOOK_BACK + 2], item[LOOK_BACK + 2];
    unsigned n = 0;
    for (unsigned i = 0; i < m; i++) {
        if (n && (item[n - 1].sp & ((1ull << COUNT_SHIFT) - 1)) == src[i].f &&
            (item[n - 1].sp >> COUNT_SHIFT) + src[i].count <= COUNT_MAX) {
            item[n - 1].sp += src[i].count << COUNT_SHIFT;
            continue;
        }
        item[n].fn = LAPSE_MARK_DROPPED;
        item[n].stamp = src[i].stamp & ~(uint64_t)1;
        item[n].sp = src[i].f | (src[i].count << COUNT_SHIFT);
        n++;
    }
    for (unsigned i = 0; i < slots; i++) {
        old[i] = from[i];
        from[i].stamp = 0; /* (unwritten, to a handler that hands the buffer over) */
    }
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (!move_cursor(t, c, from + n)) {
        for (unsigned i = 0; i < slots; i++)
            from[i] = old[i];
        return 0;
    }
    for (unsigned i = 0; i < n; i++) {
        lapse_put(&from[i], item[i].fn, item[i].stamp, item[i].sp);
    }
    return 1;
}

/* The first object dl_iterate_phdr reports is the main program. */
NOINSTR static int exe_bias(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    *(uintptr_t *)data = info->dlpi_addr;
    return 1;
}

NOINSTR void lapse_filter_load(void)
{
    const char *path = lapse_env(LAPSE_ENV_FILTER);
    if (!path || !*path)
        return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    struct stat st, exe;
    struct lapse_filter_header h;
    void *m = MAP_FAILED;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof h ||
        read(fd, &h, sizeof h) != (ssize_t)sizeof h || h.magic != LAPSE_FILTER_MAGIC ||
        (size_t)st.st_size != sizeof h + (size_t)h.ranges * sizeof(struct lapse_filter_range) ||
        h.depth > LAPSE_FILTER_MAX_DEPTH || stat("/proc/self/exe", &exe) != 0)
        goto out;
    /* another program (a child after exec): its functions were not
     * matched, so --filter and --exclude are not for it; --depth and
     * --min-time are */
    if ((uint64_t)exe.st_dev != h.dev || (uint64_t)exe.st_ino != h.ino) {
        h.ranges = 0;
        h.flags = 0;
        if (!h.depth && !h.min_ticks)
            goto out;
    }
    size_t bytes = (size_t)h.ranges * sizeof(struct lapse_filter_range);
    if (bytes) {
        m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED || pread(fd, m, bytes, sizeof h) != (ssize_t)bytes)
            goto out;
    }
    uintptr_t bias = 0;
    dl_iterate_phdr(exe_bias, &bias);
    struct lapse_filter_range *r = m == MAP_FAILED ? NULL : m;
    for (uint32_t i = 0; i < h.ranges; i++) {
        r[i].start += bias;
        r[i].end += bias;
    }
    if (bytes)
        mprotect(m, bytes, PROT_READ);
    struct lapse_filter f = {
        .ranges = r,
        .n = h.ranges,
        .lo = h.ranges ? r[0].start : 0,
        .hi = h.ranges ? r[h.ranges - 1].end : 0,
        .only = (h.flags & LAPSE_FILTER_ON) != 0,
        .depth = h.depth,
        .min_ticks = h.min_ticks,
    };
    f.stacked = f.only || f.depth;
    g_filter = f;
    m = MAP_FAILED; /* (kept for the life of the image) */
    /* last: a probe that sees `on` sees the table */
    __atomic_store_n(&g_filter.on, 1, __ATOMIC_RELEASE);
out:
    if (m != MAP_FAILED)
        munmap(m, (size_t)h.ranges * sizeof(struct lapse_filter_range));
    close(fd);
}
