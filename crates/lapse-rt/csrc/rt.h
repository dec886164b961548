/* rt.h - what the runtime's C files share (the wire protocol is lapse_rt.h).
 *
 * The files: probe.c (the probe path), scope.c (the lapse crate's
 * hooks), threads.c (threads and the slow path), buffers.c (a thread's
 * buffers), arena.c (the buffer arena shared with the recorder),
 * transport.c (the connection and the spill file), lifecycle.c
 * (start-up, fork, exec, exit, fatal signals), env.c (lapse's
 * environment variables), exec.c (the exec family and posix_spawn,
 * wrapped), trampoline.c (the return trampoline and shadow stack, with the
 * entry points in x86_64.S), unwind.c (unwinders and stack walks kept
 * away from the trampoline), context.c (swapcontext, a switch of stacks),
 * libcalls.c (calls into shared libraries), filter.c and filter.h (the
 * record-time filters: --filter, --exclude, --depth, --min-time),
 * control.c (pause, resume, marks and the toggle signal) and
 * sancov.c (LLVM's sanitizer coverage hook: `lapse build`, clang; the stub
 * such programs carry is sancov_stub.c, not part of the runtime). */
#ifndef LAPSE_RT_INTERNAL_H
#define LAPSE_RT_INTERNAL_H

#include "lapse_rt.h"

#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#define NOINSTR __attribute__((no_instrument_function))
#define LAPSE_MAX_THREADS 16384 /* registered for flushes at exit; more are recorded too */
#define BUF_BYTES ((size_t)LAPSE_BUF_BYTES)

/* A buffer is a BUF_BYTES region aligned to BUF_BYTES whose last page is a
 * guard: a claimed slot is past the end exactly when it lies in the guard,
 * which the probe sees from the slot's address alone (no `end` to read that a
 * signal handler could have changed in between). Claims past the end are
 * bounded by the nesting depth of signal handlers (the slow path runs with
 * signals blocked and installs a new buffer), far less than the guard's 170. */
#define GUARD_MASK ((uintptr_t)0xF000)
#define BUF_USABLE ((BUF_BYTES - 4096) / sizeof(struct lapse_event)) /* 2560 events */
_Static_assert(BUF_USABLE * sizeof(struct lapse_event) == BUF_BYTES - 4096,
               "the guard starts where a slot starts");
_Static_assert(BUF_BYTES == 0x10000, "the guard test assumes 64 KiB buffers");

static inline __attribute__((always_inline, no_instrument_function)) int
lapse_in_guard(const struct lapse_event *e)
{
    return ((uintptr_t)e & GUARD_MASK) == GUARD_MASK;
}

enum lapse_thread_state {
    LAPSE_T_NEW = 0,  /* zero-initialised TLS: the first probe sets it up */
    LAPSE_T_ACTIVE,   /* recorded */
    LAPSE_T_OFF,      /* not profiled (no recorder, thread ended, no memory) */
    LAPSE_T_EARLY,    /* probes before the runtime started (.preinit_array,
                         constructors run first): kept in a private buffer
                         until start-up, which hands them over */
};

/* A buffer a thread fills. */
struct lapse_buf {
    struct lapse_event *base; /* NULL: none */
    uint64_t first;           /* index of its first event in the thread's stream */
    uint64_t claimed;         /* ticks when taken: a slot stamped before is not written yet */
    int32_t arena;            /* arena buffer index, or -1 for a private buffer */
    uint32_t count;           /* slots claimed, once it stopped filling (parked) */
    uint32_t leaves;          /* slots of it that hold a leaf call (two events): the
                                 leaf exits that went into them, counted as they go */
    struct lapse_arena *owner; /* the arena it is in (an older one after a reconnection) */
};

/* Per-thread state, in initial-exec TLS. The probe touches only cur and
 * deadline; everything else belongs to the slow path, which runs with
 * signals blocked.
 *
 * A signal handler may interrupt a probe between its claim of a slot and its
 * write, and fill and hand over the buffer in between: a buffer whose slots
 * are not all written is "parked" (kept, not handed over) until a later
 * hand-over, by which time the interrupted probe has normally finished. Up
 * to LAPSE_PARKED buffers wait so (a handler may make more events than one
 * buffer holds); the oldest is handed over when a new one would not fit,
 * and one still unwritten then (its probe was abandoned by a longjmp out of
 * the handler, or the handler made more events than all of them hold) has
 * a hole (fn 0) that the recorder counts as lost. */
#define LAPSE_PARKED 2
struct lapse_tls {
    struct lapse_event *cur; /* next slot; claimed with one instruction (lapse_claim) */
    uint64_t deadline;       /* ticks: hand the buffer over after this; 0 = slow path at once */
    struct lapse_buf fill;   /* the buffer cur points into */
    struct lapse_buf parked[LAPSE_PARKED]; /* full, a slot not written yet; oldest first */
    uint32_t nparked;
    uint64_t next;           /* index of the first event of the next buffer */
    uint64_t skipped;        /* events lost since (the next buffer's index leaves a gap) */
    uint64_t stalled;        /* ticks this thread spent handing buffers over */
    /* Events of this thread that could not be handed over since its last
     * buffer that could (which leaves a gap in the numbering the recorder
     * counts), and the arena whose `undelivered` counts them meanwhile. */
    uint64_t undelivered;
    struct lapse_arena *undelivered_in;
    uint32_t tid;
    uint32_t state;
    uint32_t in_slow;     /* the slow path is running on this thread */
    struct lapse_event *merging; /* the slot a leaf exit is being written into
                                    (lapse_leaf_exit), for a hand-over under it */
    uint32_t discard;     /* calibration: hand-overs are marked discard */
    uint32_t dtor_rounds; /* pthread key destructor calls so far */
    int32_t slot;         /* index in the thread registry, -1 if none */
    uint64_t first_next;  /* where set-up starts numbering (after early events) */
    void *own_map[LAPSE_PARKED + 1]; /* private buffers' mappings (2 x BUF_BYTES each, for the alignment) */
    /* The return trampoline's state (trampoline.c): the shadow stack, and
     * its depth and generation in one word that only changes by one
     * instruction (so that a signal handler's hooks see it whole). */
    struct lapse_shadow *shadow;
    uint64_t shadow_word;
    uintptr_t *hooking;  /* the slot a hook is installing the trampoline in */
    uintptr_t rescan_at; /* dlopen called with its return address here: look
                            for new modules at the next hook above it */
    uint32_t shadow_off; /* set: this thread's hooks install no trampoline */
    uint32_t unwound;    /* set: an unwinder ran with every frame unhooked
                            (unwind.c); the next hook rehooks its callers */
    uintptr_t unwind_sp; /* where that unwinder started: hooks below it are
                            the unwinder's calls, and rehook nothing */
    uint32_t switched;   /* shadow entries below this index are a context's
                            that switched to another (context.c) */
    uint64_t self;       /* pthread_self(), for pthread_cancel (unwind.c) */
    /* Record-time filters (filter.c): the frames that count, innermost
     * last; matches nested deeper than that stack; frames left out below
     * the depth, and the place of the outermost of them. */
    uint32_t fdepth;
    uint32_t fover;
    uint32_t fbeyond;
    uintptr_t fbeyond_sp;
    struct {
        uintptr_t sp, fn;
    } fstack[LAPSE_FILTER_MAX_DEPTH];
};

extern __thread struct lapse_tls lapse_t __attribute__((tls_model("initial-exec")));

/* Claims the next slot: cur += 1, returning the old value, in one
 * instruction, so that a signal handler running probes in between cannot
 * hand the same slot out twice. (x86: xadd without lock, which is atomic
 * against signals on this thread and costs what a load and a store do.) */
static inline __attribute__((always_inline, no_instrument_function)) struct lapse_event *
lapse_claim(struct lapse_tls *t)
{
#if defined(__x86_64__)
    uintptr_t p = sizeof(struct lapse_event);
    __asm__ volatile("xaddq %0, %1" : "+r"(p), "+m"(t->cur));
    return (struct lapse_event *)p;
#else
    return (struct lapse_event *)__atomic_fetch_add((uintptr_t *)&t->cur,
                                                    sizeof(struct lapse_event), __ATOMIC_RELAXED);
#endif
}

/* Writes a claimed slot: its stamp last, after the other two words. A slot
 * counts as written once its stamp is newer than its buffer's claim
 * (lapse_slot_written); a signal handler that lands between these stores
 * and never returns (siglongjmp) then leaves a hole (lapse_hand_over), not
 * a fresh stamp over a word left from the buffer's last use: a stale `sp`
 * with LAPSE_LEAF_BIT would read as a leaf call's second event, which the
 * buffer's leaf count never had, and the next buffer's first event would be
 * taken for one the recorder had already. */
static inline __attribute__((always_inline, no_instrument_function)) void
lapse_put(struct lapse_event *e, uint64_t fn, uint64_t stamp, uintptr_t sp)
{
    e->fn = fn;
    e->sp = sp;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    e->stamp = stamp;
}

/* Whether slot `e` of buffer `b` was written since `b` was claimed: its
 * stamp, written last (lapse_put), is newer than the claim. A slot that
 * was not is a hole, whatever it holds from the buffer's last use. */
static inline __attribute__((always_inline, no_instrument_function)) int
lapse_slot_written(const struct lapse_buf *b, const struct lapse_event *e)
{
    return e->stamp >= (b->claimed << 1);
}

static inline uint64_t lapse_ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
    uint32_t lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    return ((uint64_t)hi << 32) | lo;
#elif defined(__aarch64__)
    uint64_t v;
    __asm__ volatile("mrs %0, cntvct_el0" : "=r"(v));
    return v;
#else
#error "lapse runtime: no cheap tick counter on this architecture"
#endif
}

/* ---- process-wide state (lifecycle.c) ---- */
extern int g_inited;          /* 0 never, 1 running, 2 disabled */
extern uint32_t g_pid;        /* pid of this process image */
extern uint64_t g_flush_ticks; /* hand-over period (LAPSE_FLUSH_TICKS) */
extern volatile int g_forking; /* between fork's prepare and after handlers */
uint32_t lapse_gettid(void);
void lapse_init(void);

/* ---- probe.c ---- */
/* Records a marker event (LAPSE_MARK_*) on the calling thread. */
void lapse_mark(uint64_t mark, uintptr_t sp);

/* ---- filter.c ---- */
/* The record-time filter table of this process image, set once at start-up. */
struct lapse_filter {
    uint32_t on;      /* set last: the rest is valid */
    uint32_t only;    /* --filter: nothing is kept outside a match */
    uint32_t stacked; /* only or depth: the per-thread stack is kept */
    uint32_t depth;   /* --depth (0: any) */
    uint32_t n;
    const struct lapse_filter_range *ranges; /* absolute, sorted */
    uintptr_t lo, hi; /* the first range's start, the last one's end */
    uint64_t min_ticks; /* --min-time (0: none) */
};
extern struct lapse_filter g_filter;
/* Loads the table the recorder wrote (LAPSE_ENV_FILTER) when it is for
 * this executable; start-up only. */
void lapse_filter_load(void);
/* (the decisions, inline in the probes: filter.h) */
/* --min-time: fn returns; 1 when its call was short and is now dropped
 * (counted in a marker), so no exit is to be written. */
int lapse_min_time_exit(struct lapse_tls *t, uintptr_t fn);

/* ---- calibrate.c ---- */
/* Cost of one probe in ticks x 1024 (a low quantile of short trials through
 * the real path); sets lapse_probe_spread. */
uint64_t lapse_measure_probe_cost(void);
/* The last calibration's 90th over 10th percentile of its trials, x100. */
extern uint64_t lapse_probe_spread;

/* ---- buffers.c ---- */
/* Slots of b its thread claimed, from its cursor. */
uint32_t lapse_claimed_count(const struct lapse_buf *b, const struct lapse_event *cur);
/* Leading slots of b (of count) that hold events. */
uint32_t lapse_written_prefix(const struct lapse_buf *b, uint32_t count);
/* A private buffer for t into b (not a parked one's); -1 without memory. */
int lapse_take_private(struct lapse_tls *t, struct lapse_buf *b);
/* Makes a new buffer t's filling one; -1 without memory. */
int lapse_take_buffer(struct lapse_tls *t);
/* Hands b's first count slots over (holes marked, unless all_written). */
void lapse_hand_over(struct lapse_tls *t, struct lapse_buf *b, uint32_t count, int all_written);
/* The calling thread's buffers: hand them over; with `refill`, take the next one. */
void lapse_flush_own(struct lapse_tls *t, int refill);
/* The last hand-over of a thread or process image: the parked buffers too. */
void lapse_flush_final(struct lapse_tls *t);
/* Whether e is a slot of a parked buffer that nobody wrote yet. */
int lapse_is_parked_slot(const struct lapse_tls *t, const struct lapse_event *e);
/* Every thread's buffer, at exit, exec or a crash. */
void lapse_flush_all(void);
/* Before fork: hand over, and fill a private buffer until the after-fork
 * handlers run; after them: back to the arena. */
void lapse_fork_prepare(struct lapse_tls *t);
void lapse_back_to_arena(struct lapse_tls *t);

/* ---- threads.c ---- */
extern int g_ctor_done; /* the runtime's constructor has run (lifecycle.c) */
/* Start-up on a thread that recorded early probes: takes them out of the
 * thread (so that calibration cannot touch them); lapse_early_send hands
 * them over (after HELLO) and numbers the thread's next events after them. */
struct lapse_early {
    struct lapse_buf buf;
    uint32_t count;
    uint64_t lost;
    void *map;
};
void lapse_early_detach(struct lapse_tls *t, struct lapse_early *out);
void lapse_early_send(struct lapse_tls *t, struct lapse_early *early);
/* Called by the probe when its slot is past the end, the buffer is due, or
 * the thread is not set up; `e` is the slot it claimed, `now` its tick reading. */
void lapse_slow_path(struct lapse_tls *t, struct lapse_event *e, void *fn, uint64_t is_exit,
                     uint64_t now, uintptr_t sp);
/* Sets a NEW thread up as its first probe would (without an event). */
void lapse_thread_start(struct lapse_tls *t);
/* A hook wrote past the buffer's deadline: hand the buffer over. */
void lapse_hand_over_due(struct lapse_tls *t);
extern struct lapse_tls *g_threads[LAPSE_MAX_THREADS];
int lapse_threads_init(void);
/* After fork, in the child: its numbering starts again, the parent's
 * other threads are gone. */
void lapse_fork_child(struct lapse_tls *t);
/* Blocks every signal (the slow path's state changes must not be interleaved
 * with a handler's probes); restore with lapse_unblock. */
void lapse_block(void *old_mask);
void lapse_unblock(const void *old_mask);

/* ---- arena.c ---- */
extern struct lapse_arena *g_arena; /* NULL: private buffers only */
extern int g_no_arena;
void lapse_arena_create(void);
/* Lets go of the parent's arena in a fork child. */
void lapse_arena_forget(void);
/* A free arena buffer for thread t into b (base, arena), or -1. */
int lapse_arena_claim(struct lapse_tls *t, struct lapse_buf *b);
/* 1 the first time buffer `i` of arena `a` is claimed in this process (its
 * pages may not be mapped yet), 0 after. */
int lapse_arena_first_use(const struct lapse_arena *a, int i);
/* Queues b's first `count` events for the recorder: 1 if they reach it
 * (now, through the arena or the spill), 0 if they are lost. */
int lapse_arena_hand_over(struct lapse_tls *t, struct lapse_buf *b, uint32_t count);
/* Thread t's hand-over of `count` events did (`ok`) or did not get them to
 * the recorder: the arena's `undelivered` counts those no later hand-over
 * shows as a gap. */
void lapse_arena_note_delivery(struct lapse_tls *t, uint32_t count, int ok);
/* The process ends or execs: if the recorder is gone (killed while it was
 * reading, so buffers were handed over quietly to no one), what waits in the
 * arena goes to the spill. */
void lapse_arena_settle(void);
/* Why the connection or the spill could not be opened, for the recorder. */
void lapse_arena_note_cut(int err);
/* Frees b's arena buffer without handing anything over. */
void lapse_arena_release(struct lapse_buf *b);

/* ---- transport.c ---- */
extern int g_fd; /* connection to the recorder */
void lapse_connect(const char *path);
/* The connection is still ours, or connected again (with a new arena): 0;
 * -1 when there is none (spill). */
int lapse_conn_check(void);
/* Sends one datagram (SCM_RIGHTS and all). */
enum { SEND_OK = 0, SEND_GONE = -1 /* the recorder is gone: spill */,
       SEND_MOVED = -2 /* the program took the connection over (same_conn only) */,
       SEND_TIMEOUT = -3 /* no room in the socket for SEND_TIMEOUT_S: lost */,
       SEND_LOST = -4 /* (lapse_send_msg) neither sent nor spilled: lost */ };
int lapse_try_send(struct msghdr *mh, int same_conn);
/* Sends a message (and body), or appends it to the spill file; returns
 * SEND_OK, SEND_GONE or SEND_MOVED (spilled), or why it is lost
 * (SEND_TIMEOUT: the recorder is stuck; SEND_LOST: no spill either). */
int lapse_send_msg(struct lapse_msg *m, const void *body, size_t body_len);
/* Appends a datagram made of iov[0..n) to the spill file: 0, or -1 when
 * there is none to write to (or it is full). */
int lapse_spill(const struct iovec *iov, int n);
int lapse_recorder_gone(void);
/* CLOCK_MONOTONIC now, in nanoseconds. */
uint64_t lapse_monotonic_ns(void);
/* When the connection was lost on this side rather than by the recorder
 * leaving (the program closed it, a seccomp filter refused a send), 0 if
 * it was not: the recorder lives on and will read the arena. */
uint64_t lapse_cut_here_ns(void);
void lapse_disconnect(void);
/* Lets the inherited connection go (a child that is not recorded). */
void lapse_drop_connection(void);
void lapse_transport_after_fork(void);
/* Attach again (attach.c): the last recorder's leaving is forgotten. */
void lapse_transport_reattach(void);

/* ---- attach.c ---- */
enum { ATTACH_NONE = 0, ATTACH_ON = 1, ATTACH_IDLE = 2 /* detached, may attach again */ };
extern int g_attached;
/* The recorder died without detaching: t stops recording (1), see attach.c. */
int lapse_attach_orphaned(struct lapse_tls *t);

/* ---- env.c ---- */
extern int g_no_inherit; /* --no-inherit: children are not recorded */
/* Attach (attach.c): lapse's variables from `vars` ("NAME=value" lines)
 * instead of the environment, from now on. */
void lapse_env_give(const char *vars);
/* Copies lapse's variables; with --no-inherit, removes them from environ. */
void lapse_env_init(void);
/* The value start-up saw for a LAPSE_ENV_* variable, or NULL. */
const char *lapse_env(const char *name);
/* This library's path as LD_PRELOAD names it. */
const char *lapse_env_self(void);
/* The environment a child gets (exec.c): lapse's variables added where
 * missing, or taken out with --no-inherit. */
long lapse_env_fix(char *const envp[], long n, char **out, char *preload);

/* ---- trampoline.c ---- */
/* What an entry stub (x86_64.S) hands its hook; the hook answers in it. */
struct lapse_hook {
    uintptr_t fn;    /* enter: the function, or an address in it (-pg) */
    uintptr_t *slot; /* where the return address of that call lives */
    uintptr_t aux;   /* enter: the probe source's record (libcalls), else 0 */
    uintptr_t ret;   /* exit: where the trampoline goes on to */
    /* events the fast hook could not write (a signal handler filled the
     * buffer meanwhile): lapse_hook_due records them after the hand-over */
    uint64_t pending;
    struct {
        uintptr_t fn;
        uint64_t is_exit;
        uint64_t now;
        struct lapse_event *e;
    } pend[2];
};
/* A hook's answer to its stub: done, a hand-over is due (call
 * lapse_hook_due with the vector registers saved), or everything is to be
 * done again by the slow variant (lapse_hook_enter_slow/_exit_slow). */
enum { HOOK_DONE = 0, HOOK_DUE = 1, HOOK_REDO = 2 };
/* Every hooked frame of this thread returns normally from now on (before an
 * unwinder walks the stack, pthread_exit, ...); lapse_rehook_all undoes it. */
void lapse_unhook_all(struct lapse_tls *t);
void lapse_rehook_all(struct lapse_tls *t);
/* The same for another thread t (about to be cancelled): it stops
 * installing trampolines, and its hooked frames get their real return
 * addresses back (compare-and-swap, so a frame returning meanwhile is
 * unaffected). */
void lapse_unhook_thread(struct lapse_tls *t);
/* An exception was caught by the frame whose stack pointer is `sp`: the
 * frames below it are gone, the ones above get their trampolines back. */
void lapse_rehook_above(struct lapse_tls *t, uintptr_t sp);
/* swapcontext (context.c): the thread's entries now are the leaving
 * context's, which its hooks on the other stack leave alone; returns what
 * to give lapse_switch_back once the context is resumed. */
uint32_t lapse_switch_away(struct lapse_tls *t);
void lapse_switch_back(struct lapse_tls *t, uint32_t outer);
/* The calling thread's newest entry is fn's and owns `slot` (the trampoline
 * is there): a probe of that frame now is no new call of fn (sancov.c). */
int lapse_hook_owns(const uintptr_t *slot, uintptr_t fn);
/* Forgets every entry (after lapse_unhook_all: pthread_exit). */
void lapse_shadow_drop_all(struct lapse_tls *t);
/* At thread end: the shadow stack goes (when no frame uses it). */
void lapse_shadow_free(struct lapse_tls *t);

/* ---- libcalls.c ---- */
/* One redirected import of an instrumented module: its GOT slot now holds
 * the address of stub `i` (x86_64.S), which hooks the call and goes on to
 * `target`. x86_64.S reads target and fn (stubs.h). */
struct lapse_import {
    uintptr_t target; /* where the call goes (the slot's value before) */
    uintptr_t fn;     /* the function its events name */
    uintptr_t *got;   /* the slot */
    uintptr_t stub;   /* what the slot holds now */
    uint32_t flags;   /* IMP_* */
    uint32_t module;  /* (index of the module it belongs to) */
    uint64_t pad[3];
};
enum {
    IMP_TRACE = 1,  /* entry event and return trampoline */
    IMP_RESCAN = 2, /* dlopen: look for new modules once it has returned */
};
extern struct lapse_import lapse_imports[];
/* Redirects the imports of every instrumented module loaded now (start-up)
 * or since the last call (after dlopen); the caller is in a normal context
 * (not a signal handler), the vector state saved. */
void lapse_libcalls_scan(void);
/* Applies the run-time patching plan (LAPSE_ENV_PATCH_PLAN) to the main
 * executable, when it is the one the plan is for (patch.c); start-up only. */
void lapse_patch_apply(void);
/* After a dlopen: patches the libraries it loaded that have a plan. */
void lapse_patch_loaded(void);
/* Whether patch.c patched the module with these program headers
 * (dl_iterate_phdr's dlpi_phdr): libcalls.c traces its library calls. */
int lapse_is_patched(const void *phdr);

/* A system call made by its instruction: no errno, no C library (the
 * return value is the kernel's, -errno on failure). */
static inline __attribute__((always_inline, no_instrument_function)) long
lapse_raw_syscall(long nr, long a, long b, long c, long d, long e, long f)
{
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}

/* ---- exec.c / lifecycle.c ---- */
/* Hands every buffer over before the process image is replaced. */
void lapse_before_exec(void);
/* fork's handlers (pthread_atfork), also run around the forks that bypass
 * fork() (rawfork.c). */
void lapse_before_fork(void);
void lapse_after_fork_parent(void);
void lapse_after_fork_child(void);

/* ---- control.c ---- */
/* Set while the recording is paused: probes record nothing. (Hidden, so
 * that reading it is one pc-relative load, not a load through the GOT.) */
extern volatile uint32_t g_paused __attribute__((visibility("hidden")));
/* A paused start resumes at this CLOCK_MONOTONIC time (--delay), 0: none. */
extern uint64_t g_resume_ns __attribute__((visibility("hidden")));
/* A probe while paused (checks a timed resume). */
void lapse_paused_probe(void);
/* Start-up: a paused start, the toggle signal's handler. */
void lapse_control_init(void);

/* ---- the probe (probe.c's hooks, scope.c's) ---- */
/* An exit of `fn` whose frame is at `sp`, written into its entry's slot
 * when that is the thread's last one (lapse_rt.h: LAPSE_LEAF_BIT). 1 when
 * it was; 0 when the exit needs a slot of its own: another event came
 * between, the entry is in a buffer handed over already (the slot is the
 * first of this one), the call took too long to say in 16 bits of ticks,
 * or the buffer is due (the slow path hands it over).
 *
 * The buffer counts its leaf slots: their second events number the next
 * buffer's first. Signals: a handler that claimed a slot before the last
 * look at the cursor moved it, and the exit then takes its own slot, after
 * the handler's events. One that hands the buffer over while the exit is
 * being written finds the slot in `merging`: it seals the slot if the exit
 * is not in it yet (LAPSE_SEAL_BIT; the write is a compare-and-exchange,
 * which then fails, and the exit takes a slot of the next buffer), counts
 * the buffer's leaf slots itself, and clears `merging`, so that the exit
 * is not counted twice. (A hand-over between that last test and the count
 * would count it in the next buffer too: one event counted lost that was
 * not, never the other way.) */
static inline __attribute__((always_inline, no_instrument_function)) int
lapse_leaf_exit(struct lapse_tls *t, uintptr_t fn, uintptr_t sp)
{
    /* Only a cursor inside the filling buffer, past its first slot, points
     * after a slot of it. (With no buffer, the deadline is 0 and the cursor
     * is anything: the probes that go to the slow path still move it.) */
    struct lapse_event *c = t->cur, *b = t->fill.base;
    if (!b || c <= b || c > b + BUF_USABLE || !t->deadline)
        return 0;
    struct lapse_event *p = c - 1;
    uint64_t stamp = p->stamp;
    if (p->fn != fn || p->sp != sp || (stamp & 1) || (sp >> LAPSE_LEAF_SHIFT) != 0)
        return 0;
    uint64_t now = lapse_ticks();
    uint64_t ticks = now - (stamp >> 1);
    /* (an entry stamped before the buffer was claimed is left from its last use) */
    if (ticks - 1 >= LAPSE_LEAF_MAX_TICKS || now > t->deadline || (stamp >> 1) < t->fill.claimed)
        return 0;
    uint64_t leaf = sp | LAPSE_LEAF_BIT | (ticks << LAPSE_LEAF_SHIFT);
    /* (a handler's leaf exit under this one's: the outer one's slot back after) */
    struct lapse_event *outer = t->merging;
    t->merging = p;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    int ok = 0;
    if (__atomic_load_n(&t->cur, __ATOMIC_RELAXED) == c) {
#if defined(__x86_64__)
        uint64_t was = sp;
        __asm__ volatile("cmpxchgq %2, %1" : "+a"(was), "+m"(p->sp) : "r"(leaf) : "memory", "cc");
        ok = was == sp;
#else
        ok = __atomic_compare_exchange_n(&p->sp, &(uint64_t){sp}, leaf, 0, __ATOMIC_RELAXED,
                                         __ATOMIC_RELAXED);
#endif
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        /* (one instruction, whatever the compiler: a handler's own leaf
         * exit between a load and a store would be counted and then lost,
         * and the next buffer numbered one event short) */
        if (ok && __atomic_load_n(&t->merging, __ATOMIC_RELAXED) == p) {
#if defined(__x86_64__)
            __asm__ volatile("incl %0" : "+m"(t->fill.leaves) : : "cc");
#else
            __atomic_fetch_add(&t->fill.leaves, 1, __ATOMIC_RELAXED);
#endif
        }
    }
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    /* (unless a hand-over took the outer one's slot in hand meanwhile) */
    t->merging = __atomic_load_n(&t->merging, __ATOMIC_RELAXED) == p ? outer : NULL;
    return ok;
}

/* Records one event of the calling thread: `fn` entered (is_exit 0) or
 * left, with the stack pointer of the function that made the probe. */
static inline __attribute__((always_inline, no_instrument_function)) void
lapse_probe(void *fn, uint64_t is_exit, uintptr_t sp)
{
    struct lapse_tls *t = &lapse_t;
    /* Paused (control.c): one load and one branch, nothing recorded. */
    if (__builtin_expect(g_paused, 0)) {
        if (g_resume_ns) /* (a timed resume, --delay, is due some time) */
            lapse_paused_probe();
        return;
    }
    if (is_exit && lapse_leaf_exit(t, (uintptr_t)fn, sp))
        return;
    /* Claim the slot first, in one instruction: a signal handler that fires
     * before the write gets the slots after this one, never this one. */
    struct lapse_event *e = lapse_claim(t);
    uint64_t now = lapse_ticks();
    /* past the end (the slot's address says so), or the buffer has waited
     * long enough (events reach the recorder within ~100 ms even from a
     * thread that calls little), or the thread is not set up (deadline 0) */
    if (__builtin_expect(lapse_in_guard(e) || now > t->deadline, 0)) {
        lapse_slow_path(t, e, fn, is_exit, now, sp);
        return;
    }
    lapse_put(e, (uint64_t)fn, (now << 1) | is_exit, sp);
}

#endif
