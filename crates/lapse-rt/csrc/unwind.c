/* unwind.c - frames that end without returning: keeping unwinders and
 * stack walkers away from the trampoline, and telling the recorder when
 * frames are gone (longjmp and its kin, a catch).
 *
 * C++ exceptions, Rust panics, pthread_exit and backtrace() find a frame's
 * caller by its return address; a hooked frame's return address is the
 * trampoline's, where unwinding stops (an exception would end in
 * std::terminate). So before any of them walks the stack, every hooked
 * frame of the thread gets its real return address back
 * (lapse_unhook_all), and afterwards the frames still alive get the
 * trampoline again: at once after a stack walk (backtrace), in
 * __cxa_begin_catch after an exception (the frames below the catching one
 * are gone). A panic caught without __cxa_begin_catch (Rust's catch_unwind)
 * passes no such point: the thread's next hook finds the frames it left
 * (their slots were written over, the recorder is told) and puts the
 * trampolines of the live ones back; a live frame that returns before any
 * hook runs returns normally, its exit not recorded.
 *
 * A catch and a longjmp also record an unwind marker: every frame below the
 * target's stack pointer is gone, whatever its probe source (C compiled
 * without -fexceptions has no exit probe on an exception's path), and the
 * recorder closes those calls there.
 *
 * Each wrapper calls the next definition of its function (dlsym RTLD_NEXT);
 * none depends on who called it. glibc's own forced unwinding (a thread
 * cancelled inside a hooked call) uses libgcc through a private handle that
 * cannot be wrapped: so pthread_cancel is, and the thread it cancels gets
 * its real return addresses back first (see there). */
#define _GNU_SOURCE
#include "rt.h"

#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <unwind.h>

#define EXPORT __attribute__((no_instrument_function, visibility("default")))

/* The next definition of `name`, looked up once. */
#define NEXT(type, name)                                                       \
    static type next_;                                                         \
    if (!next_)                                                                \
        next_ = (type)dlsym(RTLD_NEXT, name);

/* An exception or a panic is about to unwind this thread's stack: every
 * hooked frame gets its real return address back. Where the unwinding ends
 * is known at a C++ catch (__cxa_begin_catch); a panic caught by Rust's
 * catch_unwind passes no such point, so the thread's next hook puts the
 * trampolines of its live callers back (trampoline.c). */
NOINSTR static void unwinding(struct lapse_tls *t)
{
    lapse_unhook_all(t);
    t->unwind_sp = (uintptr_t)__builtin_frame_address(0);
    t->unwound = 1;
}

/* A program with its own unwinder (a static libgcc) has its unwinder's
 * entries patched to call this first (x86_64.S's lapse_patch_unwind): the
 * same as the wrappers below do for the shared libgcc's. */
NOINSTR __attribute__((visibility("hidden"))) void lapse_unwind_begins(void)
{
    unwinding(&lapse_t);
}

typedef _Unwind_Reason_Code (*raise_fn)(struct _Unwind_Exception *);
typedef void (*resume_fn)(struct _Unwind_Exception *);
typedef _Unwind_Reason_Code (*forced_fn)(struct _Unwind_Exception *, _Unwind_Stop_Fn, void *);
typedef _Unwind_Reason_Code (*backtrace_fn)(_Unwind_Trace_Fn, void *);

EXPORT _Unwind_Reason_Code _Unwind_RaiseException(struct _Unwind_Exception *e)
{
    NEXT(raise_fn, "_Unwind_RaiseException");
    unwinding(&lapse_t);
    return next_ ? next_(e) : _URC_FATAL_PHASE1_ERROR;
}

EXPORT _Unwind_Reason_Code _Unwind_Resume_or_Rethrow(struct _Unwind_Exception *e)
{
    NEXT(raise_fn, "_Unwind_Resume_or_Rethrow");
    unwinding(&lapse_t);
    return next_ ? next_(e) : _URC_FATAL_PHASE1_ERROR;
}

EXPORT void _Unwind_Resume(struct _Unwind_Exception *e)
{
    NEXT(resume_fn, "_Unwind_Resume");
    unwinding(&lapse_t);
    if (next_)
        next_(e);
    abort();
}

EXPORT _Unwind_Reason_Code _Unwind_ForcedUnwind(struct _Unwind_Exception *e, _Unwind_Stop_Fn stop,
                                                void *arg)
{
    NEXT(forced_fn, "_Unwind_ForcedUnwind");
    lapse_unhook_all(&lapse_t);
    return next_ ? next_(e, stop, arg) : _URC_FATAL_PHASE1_ERROR;
}

/* _Unwind_Backtrace: the program's callback sees the frames it would see
 * without the wrapper (whose own frame is the walk's first, skipped). */
struct trace_arg {
    _Unwind_Trace_Fn fn;
    void *arg;
    int seen_self;
};

NOINSTR static _Unwind_Reason_Code skip_self(struct _Unwind_Context *ctx, void *p)
{
    struct trace_arg *a = p;
    if (!a->seen_self) {
        a->seen_self = 1;
        return _URC_NO_REASON;
    }
    return a->fn(ctx, a->arg);
}

EXPORT _Unwind_Reason_Code _Unwind_Backtrace(_Unwind_Trace_Fn fn, void *arg)
{
    NEXT(backtrace_fn, "_Unwind_Backtrace");
    if (!next_)
        return _URC_FATAL_PHASE1_ERROR;
    struct trace_arg a = {fn, arg, 0};
    lapse_unhook_all(&lapse_t);
    _Unwind_Reason_Code rc = next_(skip_self, &a);
    lapse_rehook_all(&lapse_t);
    return rc;
}

/* backtrace(3): glibc walks with its own libgcc handle, so it is wrapped
 * itself; the result is what the caller would get without the wrapper. */
typedef int (*bt_fn)(void **, int);
#define BT_ROOM 256

EXPORT int backtrace(void **buffer, int size)
{
    NEXT(bt_fn, "backtrace");
    if (!next_ || size <= 0)
        return next_ ? next_(buffer, size) : 0;
    void *room[BT_ROOM + 1];
    lapse_unhook_all(&lapse_t);
    int n;
    if (size <= BT_ROOM) {
        n = next_(room, size + 1) - 1; /* the first frame is this wrapper */
        if (n > 0)
            memcpy(buffer, room + 1, (size_t)n * sizeof *buffer);
    } else {
        n = next_(buffer, size) - 1; /* (one frame short at the very end) */
        if (n > 0)
            memmove(buffer, buffer + 1, (size_t)n * sizeof *buffer);
    }
    lapse_rehook_all(&lapse_t);
    return n > 0 ? n : 0;
}

/* A catch block starts: the frames below the catching one are gone, the
 * ones above it return through the trampoline again. */
typedef void *(*begin_catch_fn)(void *);

EXPORT void *__cxa_begin_catch(void *exc)
{
    NEXT(begin_catch_fn, "__cxa_begin_catch");
    /* the catching frame's stack pointer (this call's canonical frame address) */
    uintptr_t sp = (uintptr_t)__builtin_dwarf_cfa();
    lapse_rehook_above(&lapse_t, sp);
    /* and the recorder closes the frames below it now, whatever their
     * probes (C compiled without -fexceptions has no exit on this path) */
    lapse_mark(LAPSE_MARK_UNWIND, sp);
    return next_ ? next_(exc) : exc;
}

/* pthread_cancel: the cancelled thread unwinds through glibc's own handle
 * on libgcc, which cannot be wrapped, from inside a cancellation point -
 * often a hooked library call. So before the cancellation is asked for, the
 * target stops installing trampolines and its hooked frames get their real
 * return addresses back: its destructors and cleanup handlers run as
 * without lapse (its remaining exits are not recorded). */
typedef int (*cancel_fn)(pthread_t);

EXPORT int pthread_cancel(pthread_t th)
{
    NEXT(cancel_fn, "pthread_cancel");
    if (!next_)
        return ENOSYS;
    struct lapse_tls *self = &lapse_t;
    if (pthread_equal(th, pthread_self())) {
        self->shadow_off = 1;
        lapse_unhook_all(self);
    } else {
        for (int i = 0; i < LAPSE_MAX_THREADS; i++) {
            struct lapse_tls *t = __atomic_load_n(&g_threads[i], __ATOMIC_ACQUIRE);
            if (t && t != self && pthread_equal((pthread_t)t->self, th)) {
                lapse_unhook_thread(t);
                break;
            }
        }
    }
    return next_(th);
}

/* pthread_exit unwinds the thread (glibc's forced unwinding): every frame
 * returns normally from here on, and the shadow stack empties. */
typedef void (*exit_fn)(void *);

EXPORT void pthread_exit(void *retval)
{
    NEXT(exit_fn, "pthread_exit");
    lapse_unhook_all(&lapse_t);
    lapse_shadow_drop_all(&lapse_t);
    if (next_)
        next_(retval);
    abort();
}

/* ---- longjmp and its kin ----
 * A longjmp leaves every frame below its target: the recorder closes them
 * at the jump (LAPSE_MARK_UNWIND with the target's stack pointer) rather
 * than when an outer function happens to return; the trampoline's own
 * entries need nothing (they are unhooked when a later hook finds them
 * below it). glibc keeps the target's stack pointer in the jmp_buf mangled
 * with the thread's pointer guard. */
#if defined(__x86_64__)
#define JB_RSP 6 /* glibc x86-64: rbx rbp r12 r13 r14 r15 rsp pc */

NOINSTR static uintptr_t jmp_target_sp(const struct __jmp_buf_tag *env)
{
    uintptr_t v = (uintptr_t)env->__jmpbuf[JB_RSP], guard;
    __asm__("movq %%fs:0x30, %0" : "=r"(guard)); /* tcbhead_t.pointer_guard */
    v = (v >> 17) | (v << (64 - 17));
    return v ^ guard;
}

/* Marks the jump if its target is up this stack (a plausible distance). */
NOINSTR static void mark_jump(const struct __jmp_buf_tag *env)
{
    uintptr_t to = jmp_target_sp(env), here = (uintptr_t)__builtin_frame_address(0);
    if (to > here && to - here < ((uintptr_t)1 << 36))
        lapse_mark(LAPSE_MARK_UNWIND, to);
}

typedef void (*jump_fn)(struct __jmp_buf_tag *, int);

#define JUMP_WRAPPER(name)                                                     \
    EXPORT void name(struct __jmp_buf_tag env[1], int val)                     \
    {                                                                          \
        NEXT(jump_fn, #name);                                                  \
        mark_jump(env);                                                        \
        if (next_)                                                             \
            next_(env, val);                                                   \
        abort();                                                               \
    }

JUMP_WRAPPER(longjmp)
JUMP_WRAPPER(_longjmp)
JUMP_WRAPPER(siglongjmp)
void __longjmp_chk(struct __jmp_buf_tag env[1], int val);
JUMP_WRAPPER(__longjmp_chk)
#endif
