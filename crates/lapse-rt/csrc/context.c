/* context.c - swapcontext, wrapped: a switch to another stack is neither a
 * return nor an unwinding.
 *
 * A context made by makecontext runs on whatever memory it was given, a
 * local array of a frame that is still live included (uftrace's
 * t014_ucontext: main's `char stack[8192]`). Where a frame lies then says
 * nothing about the frames of the context that switched away: they are
 * suspended, not gone, and return once that context is resumed. Stack
 * bounds cannot tell the two stacks apart in such a program (one lies
 * inside the other), so the switch itself is the marker:
 * - the runtime: the thread's shadow-stack entries at the switch are the
 *   leaving context's; hooks on the other stack do not take them for gone
 *   (lapse_switch_away, trampoline.c), until the context is resumed;
 * - the recorder: LAPSE_MARK_SWITCH names the slot of this call's return
 *   address; the innermost open call whose frame is there or above it
 *   (swapcontext's own, traced as the C library's, or else its innermost
 *   traced caller) becomes a barrier to the stack-pointer rule, and its
 *   own exit, once the context is resumed, lifts it and closes what the
 *   other context left above it.
 * A context that never comes back leaves its calls open until an exit
 * further down closes them, or the thread ends.
 *
 * Wrapped, not hooked in place: swapcontext saves its own return address in
 * the context it leaves, and a trampoline's address saved there would be
 * returned through whenever the context is resumed, long after its
 * shadow-stack entry may be gone. Saved here, it is this wrapper's (a call,
 * never a tail call). getcontext and setcontext stay untraced (one returns
 * again at every setcontext, the other never). */
#define _GNU_SOURCE
#include "rt.h"

#include <dlfcn.h>
#include <errno.h>
#include <ucontext.h>

#define EXPORT __attribute__((no_instrument_function, visibility("default")))

typedef int (*swap_fn)(ucontext_t *, const ucontext_t *);

EXPORT int swapcontext(ucontext_t *from, const ucontext_t *to)
{
    static swap_fn next_;
    swap_fn next = __atomic_load_n(&next_, __ATOMIC_ACQUIRE);
    if (!next) {
        next = (swap_fn)dlsym(RTLD_NEXT, "swapcontext");
        if (!next) {
            errno = ENOSYS;
            return -1;
        }
        __atomic_store_n(&next_, next, __ATOMIC_RELEASE);
    }
    uint32_t outer = lapse_switch_away(&lapse_t);
    /* the slot of this call's return address (its caller's stack pointer
     * at the call, less the address pushed) */
    lapse_mark(LAPSE_MARK_SWITCH, (uintptr_t)__builtin_dwarf_cfa() - sizeof(void *));
    int r = next(from, to);
    /* resumed (on this thread, or another one if the program moved the
     * context: its thread's state, read again) */
    lapse_switch_back(&lapse_t, outer);
    __asm__ volatile("" : "+r"(r)); /* (returns here: not a tail call) */
    return r;
}
