/* trampoline.c - the one return trampoline and the per-thread shadow stack,
 * shared by every probe source that has no exit hook of its own: -pg's
 * mcount, -pg -mfentry's __fentry__ and library calls. Their entry points
 * are in x86_64.S; this file is what they run.
 *
 * An entry hook knows the slot where its call's return address lives. It
 * saves that address on the thread's shadow stack and writes the address of
 * the trampoline (lapse_tramp_return) in its place. When the function
 * returns it lands in the trampoline, which records the exit, takes its
 * entry off the shadow stack and goes on to the saved address.
 *
 * The rule that keeps the program safe: an entry leaves the shadow stack
 * only once its slot no longer holds the trampoline's address - its frame
 * returned through it, a tail call took the slot over, a new call wrote its
 * own return address there, or the runtime wrote the real address back
 * first ("unhooking": the frame then returns normally, only its exit event
 * is missing). Whenever the runtime cannot tell what happened to a frame
 * (longjmp, an exception, a signal handler on another stack), it unhooks;
 * it never guesses. Among entries that name the same slot, only the newest
 * can own the trampoline there, so entries are only ever dropped from the
 * top, newest first. One exception to "below a new call means gone": the
 * entries a context left when it switched to another (swapcontext,
 * context.c: those below t->switched) are suspended on a stack the new
 * context does not use, not gone, so its hooks leave them alone; when the
 * context resumes, its own returns drop whatever the other one left above.
 *
 * Signals: a handler may run hooks between any two instructions here. The
 * depth and a generation count share one word, changed only by a single
 * (unlocked) cmpxchg: an entry is written above the top first and counts
 * once the word moves; any push in between bumps the generation, so a
 * writer that was interrupted sees it and starts again.
 *
 * Vector registers: an entry hook runs before its function has read its
 * arguments, the trampoline before the caller has read the return value,
 * so the hooks are built with general registers only and call nothing. What
 * needs the C library (setting a thread up, handing a buffer over) goes to
 * the slow variants, which the stub calls with the vector state saved.
 *
 * Cost per hooked call (bench/instrument/run.sh, BENCHMARKS.md): two tick
 * reads (entry and exit events), the stub's register saves, about 40
 * instructions of shadow-stack work and one unlocked cmpxchg each way; no
 * lock, no allocation, no system call. System calls happen only to unhook
 * a frame that may lie in memory that is gone (process_vm_readv), which
 * takes a longjmp or an exception to happen. */
#define _GNU_SOURCE
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

/* Everything in this file, rt.h's inline helpers included, is built for the
 * general registers only (see "Vector registers" above). */
#if defined(__x86_64__)
#pragma GCC target("general-regs-only")
#endif
#include "rt.h"
#include "filter.h"
#include "stubs.h"

#if defined(__x86_64__)

/* Entries per thread; deeper hooked frames are not traced (the thread stops
 * installing trampolines and says so, see shadow_off). The mapping is
 * reserved, not committed: only the pages a thread reaches count. */
#define TRAMP_DEPTH 65535u
#define DEPTH_MASK 0xffffull
#define GEN_ONE (1ull << 16)

struct lapse_shadow_entry {
    uintptr_t *slot; /* where the frame's return address lives */
    uintptr_t ret;   /* the real return address */
    uintptr_t fn;    /* for the exit event */
    uintptr_t aux;   /* the probe source's record (libcalls), else 0 */
};

struct lapse_shadow {
    struct lapse_shadow_entry e[TRAMP_DEPTH];
};

#define SHADOW_BYTES (sizeof(struct lapse_shadow))

/* x86_64.S lays struct lapse_hook out by hand (stubs.h) */
_Static_assert(sizeof(struct lapse_hook) <= HOOK_BYTES, "stubs.h: HOOK_BYTES");
_Static_assert(offsetof(struct lapse_hook, fn) == HOOK_FN &&
                   offsetof(struct lapse_hook, slot) == HOOK_SLOT &&
                   offsetof(struct lapse_hook, aux) == HOOK_AUX &&
                   offsetof(struct lapse_hook, ret) == HOOK_RET,
               "stubs.h: HOOK_*");
_Static_assert(HOOK_DUE == HOOK_DUE_CODE, "stubs.h: HOOK_DUE_CODE");

extern void lapse_tramp_return(void); /* x86_64.S */

#define GR_ONLY __attribute__((no_instrument_function))
#define INLINE static inline __attribute__((always_inline, no_instrument_function))

INLINE uintptr_t tramp_addr(void)
{
    return (uintptr_t)lapse_tramp_return;
}

/* The word is changed by this thread only (and its signal handlers): an
 * unlocked cmpxchg is atomic against them and costs a few cycles. */
INLINE int cas_word(uint64_t *p, uint64_t old, uint64_t new)
{
    uint64_t prev = old;
    __asm__ volatile("cmpxchgq %2, %1" : "+a"(prev), "+m"(*p) : "r"(new) : "cc", "memory");
    return prev == old;
}

INLINE uint64_t load_word(const uint64_t *p)
{
    return *(const volatile uint64_t *)p;
}

INLINE uintptr_t sp_now(void)
{
    uintptr_t sp;
    __asm__ volatile("movq %%rsp, %0" : "=r"(sp));
    return sp;
}

/* Reads or writes one word through the kernel, so that memory that is no
 * longer mapped (the stack of a context that is gone) is an error, not a
 * fault: 0 done, -EFAULT not mapped, other: the kernel does not allow it. */
INLINE long vm_word(uintptr_t *p, uintptr_t *v, int write)
{
    long me = lapse_raw_syscall(SYS_gettid, 0, 0, 0, 0, 0, 0); /* (a vfork or fork child too) */
    struct iovec local = {v, sizeof *v}, remote = {p, sizeof *p};
    long r = lapse_raw_syscall(write ? SYS_process_vm_writev : SYS_process_vm_readv, me,
                               (long)&local, 1, (long)&remote, 1, 0);
    return r == (long)sizeof *v ? 0 : (r < 0 ? r : -14);
}

/* Writes `ret` back into the slot p if the trampoline is still there. `lo`
 * and `hi` bound stack memory known to be mapped (the hook's own frames up
 * to its call's slot); anything else goes through the kernel. The slot a
 * hook of this thread is installing right now (a signal handler interrupted
 * it) belongs to that hook: an older entry that named it is only dropped. */
INLINE void unhook_slot(struct lapse_tls *t, uintptr_t *p, uintptr_t ret, uintptr_t lo,
                        uintptr_t hi)
{
    uintptr_t tramp = tramp_addr();
    if (p == t->hooking)
        return;
    if ((uintptr_t)p >= lo && (uintptr_t)p <= hi) {
        if (*p == tramp)
            *p = ret;
        return;
    }
    uintptr_t v = 0;
    long r = vm_word(p, &v, 0);
    if (r == 0) {
        if (v == tramp)
            (void)vm_word(p, &ret, 1);
    } else if (r != -14 /* EFAULT: gone, nothing to undo */) {
        /* (process_vm_* refused here: the memory is read directly) */
        if (*p == tramp)
            *p = ret;
    }
}

/* Drops the top entry if the word is still w (writing its return address
 * back first when its slot still holds the trampoline); 0 when a signal
 * handler changed the stack meanwhile (look again). */
INLINE int drop_top(struct lapse_tls *t, uint64_t w, uintptr_t lo, uintptr_t hi)
{
    struct lapse_shadow_entry *top = &t->shadow->e[(w & DEPTH_MASK) - 1];
    uintptr_t *slot = top->slot;
    uintptr_t ret = top->ret;
    if (!cas_word(&t->shadow_word, w, w - 1))
        return 0;
    unhook_slot(t, slot, ret, lo, hi);
    return 1;
}

/* The thread's shadow stack, mapped on its first hook (a thread that
 * cannot have one installs no trampoline, and says so). */
NOINSTR static void shadow_setup(struct lapse_tls *t)
{
    sigset_t old;
    lapse_block(&old);
    if (!t->shadow) {
        void *m = mmap(NULL, SHADOW_BYTES, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m != MAP_FAILED)
            t->shadow = m;
    }
    lapse_unblock(&old);
    if (!t->shadow) {
        t->shadow_off = 1;
        lapse_mark(LAPSE_MARK_UNTRACED, 0);
    }
}

/* Records one event. The fast variant (slow 0) calls nothing: when the
 * buffer is due it still writes and answers HOOK_DUE; a slot past the end
 * (a signal handler filled the buffer since the stub's room check) is left
 * to lapse_hook_due, which records the event after the hand-over. */
INLINE int put_event(struct lapse_tls *t, struct lapse_hook *h, uintptr_t fn, uint64_t is_exit,
                     int slow)
{
    uintptr_t sp = (uintptr_t)h->slot; /* (the frame's place: its return address) */
    if (__builtin_expect(g_filter.on, 0) && fn >= LAPSE_MARK_LIMIT &&
        !(is_exit ? lapse_filter_exit(t, fn, sp) && !(g_filter.min_ticks && lapse_min_time_exit(t, fn))
                  : lapse_filter_enter(t, fn, sp)))
        return HOOK_DONE; /* (left out by a record-time filter, filter.c; first, as
                          * in probe.c, so its frames stay right across a pause) */
    /* Paused (control.c): nothing recorded; the trampoline still runs, so
     * the stack stays as it is. (A timed resume, --delay, needs a call the
     * fast variant cannot make: it records on, and the analysis leaves
     * the paused stretch out.) */
    if (__builtin_expect(g_paused, 0) && (slow || !g_resume_ns)) {
        if (slow)
            lapse_paused_probe();
        return HOOK_DONE;
    }
    if (is_exit && lapse_leaf_exit(t, fn, sp))
        return HOOK_DONE;
    struct lapse_event *e = lapse_claim(t);
    uint64_t now = lapse_ticks();
    if (__builtin_expect(lapse_in_guard(e) || now > t->deadline, 0)) {
        if (slow) {
            lapse_slow_path(t, e, (void *)fn, is_exit, now, sp);
            return HOOK_DONE;
        }
        if (lapse_in_guard(e)) {
            uint64_t k = h->pending++; /* (at most two events per hook) */
            h->pend[k].fn = fn;
            h->pend[k].is_exit = is_exit;
            h->pend[k].now = now;
            h->pend[k].e = e;
            return HOOK_DUE;
        }
        lapse_put(e, fn, (now << 1) | is_exit, sp);
        return HOOK_DUE;
    }
    lapse_put(e, fn, (now << 1) | is_exit, sp);
    return HOOK_DONE;
}

/* This thread installs no more trampolines (its frames that have one
 * still return through it), and the recording says so. */
INLINE int stop_tracing(struct lapse_tls *t, struct lapse_hook *h, int slow)
{
    t->shadow_off = 1;
    if (slow) {
        lapse_mark(LAPSE_MARK_UNTRACED, (uintptr_t)h->slot);
        return HOOK_DONE;
    }
    uint64_t k = h->pending++;
    h->pend[k].fn = LAPSE_MARK_UNTRACED;
    h->pend[k].is_exit = 0;
    h->pend[k].now = lapse_ticks();
    h->pend[k].e = NULL; /* (no slot claimed: the slow path takes one) */
    return HOOK_DUE;
}

INLINE int recording(const struct lapse_tls *t)
{
    return t->state == LAPSE_T_ACTIVE || t->state == LAPSE_T_EARLY;
}

/* Room for n more events in the filling buffer without reaching its guard. */
INLINE int room_for(const struct lapse_tls *t, unsigned n)
{
    uintptr_t off = (uintptr_t)t->cur & (BUF_BYTES - 1);
    return t->cur && off + n * sizeof(struct lapse_event) <= BUF_USABLE * sizeof(struct lapse_event);
}

/* ---- entry ---- */

INLINE int hook_enter_at(struct lapse_tls *t, struct lapse_hook *h, int slow);

/* Installs the trampoline for one call; `t->hooking` names its slot for the
 * whole time (see unhook_slot), restored for the hook a handler interrupted. */
INLINE int hook_enter(struct lapse_hook *h, int slow)
{
    struct lapse_tls *t = &lapse_t;
    h->pending = 0;
    uintptr_t *outer = t->hooking;
    t->hooking = h->slot;
    int rc = hook_enter_at(t, h, slow);
    t->hooking = outer;
    return rc;
}

INLINE int hook_enter_at(struct lapse_tls *t, struct lapse_hook *h, int slow)
{
    if (t->shadow_off || t->state == LAPSE_T_OFF)
        return HOOK_DONE; /* not recorded: no trampoline either */
    if (!slow && (!t->shadow || !recording(t) || !room_for(t, 2) || t->unwound))
        return HOOK_REDO;
    if (!t->shadow)
        return HOOK_DONE; /* (the slow variant could not get one) */
    uintptr_t *slot = h->slot;
    uintptr_t tramp = tramp_addr();
    uintptr_t ret = *slot;
    uintptr_t lo = sp_now(), hi = (uintptr_t)slot;
    struct lapse_shadow_entry *E = t->shadow->e;
    int rc = HOOK_DONE;
    int changed = 0;
    uintptr_t gone = 0; /* the highest slot of a frame found gone */
    uint64_t w;
    for (;;) {
        w = load_word(&t->shadow_word);
        uint32_t d = (uint32_t)(w & DEPTH_MASK);
        /* (entries a context left when it switched away are not below
         * a call on the other stack; tested last, off the common path) */
        if (d && E[d - 1].slot <= slot && d > t->switched) {
            struct lapse_shadow_entry *top = &E[d - 1];
            if (top->slot == slot && ret == tramp) {
                /* A tail call: the function that owned this slot jumped
                 * here. It ends now; this call returns where it would. */
                uintptr_t fn = top->fn, real = top->ret;
                if (!cas_word(&t->shadow_word, w, w - 1))
                    continue;
                ret = real;
                changed = 1;
                if (recording(t))
                    rc |= put_event(t, h, fn, 1, slow);
                continue;
            }
            /* Below this call (gone, or on another stack): unhook it. The
             * same slot without the trampoline was written over by this
             * very call: nothing to write back there. The recorder is told
             * (an unwind marker, from the slow variant): a frame left
             * without returning (a panic caught by catch_unwind, which no
             * wrapper sees) must not hold this call as its child, and its
             * own slot is the same when both were called from one place. */
            if (!slow && !changed)
                return HOOK_REDO;
            gone = (uintptr_t)top->slot > gone ? (uintptr_t)top->slot : gone;
            if (top->slot == slot) {
                if (!cas_word(&t->shadow_word, w, w - 1))
                    continue;
            } else if (!drop_top(t, w, lo, hi)) {
                continue;
            }
            continue;
        }
        if (ret == tramp) {
            /* The trampoline is here but its entry is not on top: entries
             * of another stack lie above it. Unhook those, then it is a
             * tail call as above. */
            uint32_t k = d;
            while (k && E[k - 1].slot != slot)
                k--;
            if (!k)
                return rc; /* nobody owns it: leave this call alone */
            if (!drop_top(t, w, lo, hi))
                continue;
            continue;
        }
        if (d >= TRAMP_DEPTH)
            return rc | stop_tracing(t, h, slow); /* too deep to follow */
        struct lapse_shadow_entry *e = &E[d];
        e->slot = slot;
        e->ret = ret;
        e->fn = h->fn;
        e->aux = h->aux;
        /* the trampoline goes in before the entry counts: a handler that
         * sees the entry sees its slot hooked */
        *slot = tramp;
        if (cas_word(&t->shadow_word, w, w + GEN_ONE + 1))
            break;
    }
    if (gone && slow && recording(t))
        lapse_mark(LAPSE_MARK_UNWIND, gone + 1); /* (frames up to `gone` end) */
    if (t->unwound && slow && (uintptr_t)h->slot > t->unwind_sp) {
        /* an unwinder unhooked every frame and no catch said where it
         * stopped (unwind.c): the frames left are this call's callers.
         * (A call below where the unwinder started is the unwinder's own:
         * a personality routine of a patched program, which must find
         * every frame still unhooked.) */
        t->unwound = 0;
        lapse_rehook_all(t);
    }
    if (recording(t))
        rc |= put_event(t, h, h->fn, 0, slow);
    return rc;
}

/* (read only: a signal handler in between leaves the stack as it found it
 * or unhooked, and then this call is simply not recorded) */
NOINSTR int lapse_hook_owns(const uintptr_t *slot, uintptr_t fn)
{
    struct lapse_tls *t = &lapse_t;
    if (!t->shadow)
        return 0;
    uint32_t d = (uint32_t)(load_word(&t->shadow_word) & DEPTH_MASK);
    if (!d || d <= t->switched)
        return 0;
    const struct lapse_shadow_entry *top = &t->shadow->e[d - 1];
    return top->slot == slot && top->fn == fn && *slot == tramp_addr();
}

/* ---- library calls (libcalls.c redirects them to x86_64.S's stubs) ---- */

/* dlopen was called from below this hook's slot and has returned: new
 * modules may be there to redirect (in the slow variant, outside any signal
 * handler that interrupted dlopen, whose slots would lie below its call). */
INLINE int rescan_due(const struct lapse_tls *t, uintptr_t *slot)
{
    return t->rescan_at && (uintptr_t)slot >= t->rescan_at;
}

NOINSTR static void rescan(struct lapse_tls *t)
{
    t->rescan_at = 0;
    lapse_patch_loaded(); /* (first: a patched library's calls are traced) */
    lapse_libcalls_scan();
}

INLINE int libcall_enter(struct lapse_hook *h, int slow)
{
    struct lapse_tls *t = &lapse_t;
    struct lapse_import *imp = (struct lapse_import *)h->aux;
    if (rescan_due(t, h->slot)) {
        if (!slow)
            return HOOK_REDO;
        rescan(t);
    }
    uint32_t flags = __atomic_load_n(&imp->flags, __ATOMIC_RELAXED);
    if (flags & IMP_RESCAN)
        t->rescan_at = (uintptr_t)h->slot; /* (dlopen: the stub only notes it) */
    if (!(flags & IMP_TRACE))
        return HOOK_DONE;
    return hook_enter(h, slow);
}

GR_ONLY __attribute__((visibility("hidden"))) int lapse_libcall_hook(struct lapse_hook *h)
{
    return libcall_enter(h, 0);
}

NOINSTR __attribute__((visibility("hidden"))) int lapse_libcall_hook_slow(struct lapse_hook *h)
{
    struct lapse_tls *t = &lapse_t;
    if (t->state == LAPSE_T_NEW)
        lapse_thread_start(t);
    if (!t->shadow && !t->shadow_off && recording(t))
        shadow_setup(t);
    return libcall_enter(h, 1);
}

/* ---- exit: the trampoline ---- */

__attribute__((noreturn, no_instrument_function)) static void lost_return(void)
{
    static const char msg[] =
        "lapse: the return trampoline found no return address for this frame; aborting\n";
    (void)!write(2, msg, sizeof msg - 1);
    abort();
}

INLINE int hook_exit(struct lapse_hook *h, int slow)
{
    struct lapse_tls *t = &lapse_t;
    h->pending = 0;
    uintptr_t *slot = h->slot;
    if (!slow && ((recording(t) && !room_for(t, 1)) || rescan_due(t, slot)))
        return HOOK_REDO;
    if (slow && rescan_due(t, slot))
        rescan(t);
    uintptr_t lo = sp_now(), hi = (uintptr_t)slot;
    struct lapse_shadow_entry *E = t->shadow ? t->shadow->e : 0;
    for (;;) {
        uint64_t w = load_word(&t->shadow_word);
        uint32_t d = (uint32_t)(w & DEPTH_MASK);
        if (!E || !d)
            lost_return();
        struct lapse_shadow_entry *top = &E[d - 1];
        if (top->slot != slot) {
            /* Entries above this frame's (it returned past them): their
             * frames are gone or on another stack. Unhook them. */
            uint32_t k = d - 1;
            while (k && E[k - 1].slot != slot)
                k--;
            if (!k)
                lost_return();
            drop_top(t, w, lo, hi);
            continue;
        }
        uintptr_t ret = top->ret, fn = top->fn;
        if (!cas_word(&t->shadow_word, w, w - 1))
            continue;
        h->ret = ret;
        h->fn = fn;
        break;
    }
    if (recording(t))
        return put_event(t, h, h->fn, 1, slow);
    return HOOK_DONE;
}

GR_ONLY __attribute__((visibility("hidden"))) int lapse_hook_enter(struct lapse_hook *h)
{
    return hook_enter(h, 0);
}

GR_ONLY __attribute__((visibility("hidden"))) int lapse_hook_exit(struct lapse_hook *h)
{
    return hook_exit(h, 0);
}

/* ---- the slow variants (called with the vector state saved) ---- */

NOINSTR __attribute__((visibility("hidden"))) int lapse_hook_enter_slow(struct lapse_hook *h)
{
    struct lapse_tls *t = &lapse_t;
    if (t->state == LAPSE_T_NEW)
        lapse_thread_start(t);
    if (!t->shadow && !t->shadow_off && recording(t))
        shadow_setup(t);
    return hook_enter(h, 1);
}

NOINSTR __attribute__((visibility("hidden"))) int lapse_hook_exit_slow(struct lapse_hook *h)
{
    return hook_exit(h, 1);
}

/* A fast hook wrote an event after the buffer's deadline, or could not
 * write one: hand the buffer over (and record those events after it). */
NOINSTR __attribute__((visibility("hidden"))) int lapse_hook_due(struct lapse_hook *h)
{
    struct lapse_tls *t = &lapse_t;
    if (!h->pending) {
        lapse_hand_over_due(t);
        return HOOK_DONE;
    }
    for (uint64_t k = 0; k < h->pending && k < 2; k++)
        lapse_slow_path(t, h->pend[k].e, (void *)h->pend[k].fn, h->pend[k].is_exit,
                        h->pend[k].now, (uintptr_t)h->slot);
    return HOOK_DONE;
}

/* ---- lapse_vsave_call's plan (x86_64.S) ---- */

/* 0 not known yet, 1 FXSAVE, 2 XSAVE of lapse_vsave_mask; bytes to reserve. */
__attribute__((visibility("hidden"))) uint32_t lapse_vsave_mode;
__attribute__((visibility("hidden"))) uint64_t lapse_vsave_bytes = 512 + 64;
__attribute__((visibility("hidden"))) uint64_t lapse_vsave_mask;

INLINE void cpuid2(uint32_t leaf, uint32_t sub, uint32_t r[4])
{
    __asm__ volatile("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(sub));
}

/* What to save: every user state component XCR0 enables, except AMX tiles
 * (8 KiB, and a signal handler's small alternate stack must still fit).
 * Threads may race here: they compute the same values. */
GR_ONLY __attribute__((visibility("hidden"))) void lapse_vstate_init(void)
{
    uint32_t r[4];
    cpuid2(1, 0, r);
    if (!(r[2] & (1u << 27))) { /* no OSXSAVE */
        lapse_vsave_bytes = 512 + 64;
        __atomic_store_n(&lapse_vsave_mode, 1, __ATOMIC_RELEASE);
        return;
    }
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    uint64_t mask = (((uint64_t)hi << 32) | lo) & ~((1ull << 17) | (1ull << 18));
    uint64_t end = 576; /* legacy area and header */
    for (uint32_t i = 2; i < 63; i++) {
        if (!(mask & (1ull << i)))
            continue;
        cpuid2(0xd, i, r);
        if ((uint64_t)r[1] + r[0] > end)
            end = (uint64_t)r[1] + r[0];
    }
    lapse_vsave_mask = mask;
    lapse_vsave_bytes = end + 64; /* (and room to align to 64) */
    __atomic_store_n(&lapse_vsave_mode, 2, __ATOMIC_RELEASE);
}

/* ---- unwinding, stack walks, thread end ---- */

NOINSTR void lapse_unhook_all(struct lapse_tls *t)
{
    if (!t->shadow)
        return;
    uintptr_t tramp = tramp_addr();
    uint32_t d = (uint32_t)(load_word(&t->shadow_word) & DEPTH_MASK);
    /* newest first: of entries that share a slot, the newest owns it */
    for (uint32_t i = d; i-- > 0;) {
        struct lapse_shadow_entry *e = &t->shadow->e[i];
        uintptr_t v = 0;
        if (vm_word(e->slot, &v, 0) == 0) {
            if (v == tramp)
                (void)vm_word(e->slot, &e->ret, 1);
        } else if (*e->slot == tramp) {
            *e->slot = e->ret;
        }
    }
}

NOINSTR void lapse_unhook_thread(struct lapse_tls *t)
{
    __atomic_store_n(&t->shadow_off, 1, __ATOMIC_SEQ_CST);
    struct lapse_shadow *sh = __atomic_load_n(&t->shadow, __ATOMIC_ACQUIRE);
    if (!sh)
        return;
    uintptr_t tramp = tramp_addr();
    uint32_t d = (uint32_t)(__atomic_load_n(&t->shadow_word, __ATOMIC_ACQUIRE) & DEPTH_MASK);
    for (uint32_t i = d; i-- > 0;) {
        uintptr_t *slot = __atomic_load_n(&sh->e[i].slot, __ATOMIC_RELAXED);
        uintptr_t ret = __atomic_load_n(&sh->e[i].ret, __ATOMIC_RELAXED);
        uintptr_t v = 0;
        if (!slot || vm_word(slot, &v, 0) != 0 || v != tramp)
            continue; /* (not mapped, or not hooked any more) */
        uintptr_t expect = tramp;
        __atomic_compare_exchange_n(slot, &expect, ret, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
    }
}

NOINSTR static void rehook(struct lapse_shadow_entry *e, uintptr_t tramp)
{
    uintptr_t v = 0;
    if (vm_word(e->slot, &v, 0) == 0) {
        if (v == e->ret)
            (void)vm_word(e->slot, &tramp, 1);
    } else if (*e->slot == e->ret) {
        *e->slot = tramp;
    }
}

NOINSTR void lapse_rehook_all(struct lapse_tls *t)
{
    if (!t->shadow)
        return;
    uintptr_t tramp = tramp_addr();
    uint32_t d = (uint32_t)(load_word(&t->shadow_word) & DEPTH_MASK);
    for (uint32_t i = d; i-- > 0;)
        rehook(&t->shadow->e[i], tramp);
}

NOINSTR void lapse_rehook_above(struct lapse_tls *t, uintptr_t sp)
{
    t->unwound = 0;
    if (!t->shadow)
        return;
    uintptr_t lo = sp_now();
    for (;;) {
        uint64_t w = load_word(&t->shadow_word);
        uint32_t d = (uint32_t)(w & DEPTH_MASK);
        /* (frames another context left are not the catching frame's callees) */
        if (d <= t->switched || (uintptr_t)t->shadow->e[d - 1].slot >= sp)
            break;
        drop_top(t, w, lo, sp);
    }
    lapse_rehook_all(t);
}

NOINSTR uint32_t lapse_switch_away(struct lapse_tls *t)
{
    uint32_t outer = t->switched;
    t->switched = (uint32_t)(load_word(&t->shadow_word) & DEPTH_MASK);
    return outer;
}

NOINSTR void lapse_switch_back(struct lapse_tls *t, uint32_t outer)
{
    t->switched = outer;
}

NOINSTR void lapse_shadow_drop_all(struct lapse_tls *t)
{
    for (;;) {
        uint64_t w = load_word(&t->shadow_word);
        if (cas_word(&t->shadow_word, w, w & ~DEPTH_MASK))
            return;
    }
}

NOINSTR void lapse_shadow_free(struct lapse_tls *t)
{
    if (t->shadow && (load_word(&t->shadow_word) & DEPTH_MASK) == 0) {
        munmap(t->shadow, SHADOW_BYTES);
        t->shadow = NULL;
    }
}

#else /* no trampoline on this architecture */

NOINSTR void lapse_unhook_thread(struct lapse_tls *t) { (void)t; }
NOINSTR int lapse_hook_owns(const uintptr_t *slot, uintptr_t fn) { (void)slot; (void)fn; return 0; }
NOINSTR void lapse_unhook_all(struct lapse_tls *t) { (void)t; }
NOINSTR void lapse_rehook_all(struct lapse_tls *t) { (void)t; }
NOINSTR void lapse_rehook_above(struct lapse_tls *t, uintptr_t sp) { (void)t; (void)sp; }
NOINSTR void lapse_shadow_drop_all(struct lapse_tls *t) { (void)t; }
NOINSTR uint32_t lapse_switch_away(struct lapse_tls *t) { (void)t; return 0; }
NOINSTR void lapse_switch_back(struct lapse_tls *t, uint32_t outer) { (void)t, (void)outer; }
NOINSTR void lapse_shadow_free(struct lapse_tls *t) { (void)t; }

#endif
