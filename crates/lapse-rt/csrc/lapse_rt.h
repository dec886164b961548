/* lapse_rt.h - what the runtime's C files share, and the wire protocol the
 * recorder reads (mirrored in src/protocol.rs; keep the two in step). */
#ifndef LAPSE_RT_H
#define LAPSE_RT_H

#include <stdint.h>

/* Events per thread buffer: 4096 x 16 bytes = 64 KiB, one datagram. */
#define LAPSE_BUF_EVENTS 4096
#define LAPSE_MAX_THREADS 4096

#define LAPSE_MAGIC 0x3153504cu /* "LPS1" little-endian */

enum lapse_msg_kind {
    LAPSE_MSG_HELLO = 1,  /* a process (or a new exec image) starts */
    LAPSE_MSG_EVENTS = 2, /* a thread's events follow the header */
    LAPSE_MSG_FORK = 3,   /* sent by the forking thread just before fork() */
    LAPSE_MSG_CHILD = 4,  /* first message of a fork child */
    LAPSE_MSG_EXEC = 5,   /* sent just before execve() */
    LAPSE_MSG_ARENA = 6,  /* the process's shared buffer arena; its memfd rides along (SCM_RIGHTS) */
    LAPSE_MSG_SHM_EVENTS = 7, /* a thread's events are in arena buffer d */
};

/* EVENTS flag: calibration events, the recorder drops them. */
#define LAPSE_FLAG_DISCARD 1u

/* One 40-byte header per datagram.
 *  HELLO:  a = probe cost in ticks x 1024, b = tsc now, c = ppid
 *  EVENTS: a = index of the thread's first event in this message, c = count,
 *          b = ticks the thread had spent in hand-overs before this message's
 *              events were taken (the recorder removes that time)
 *  FORK:   b = tsc at fork
 *  CHILD:  b = tsc at fork (as in the parent's FORK), c = ppid, d = parent tid
 *  EXEC:   b = tsc now
 *  ARENA:  a = arena bytes, c = buffers, d = events per buffer
 *  SHM_EVENTS: as EVENTS (a, b, c), d = arena buffer holding the events;
 *          the datagram has no body */
struct lapse_msg {
    uint32_t magic;
    uint16_t kind;
    uint16_t flags;
    uint32_t pid;
    uint32_t tid;
    uint64_t a;
    uint64_t b;
    uint32_t c;
    uint32_t d;
};

/* One probe firing: the function's address and (ticks << 1 | is_exit). */
struct lapse_event {
    uint64_t fn;
    uint64_t stamp;
};

/* The shared arena: one memfd per process image, mapped by the runtime and
 * (through the fd passed in ARENA) by the recorder. A header page of slot
 * states, then LAPSE_ARENA_BUFS buffers of LAPSE_BUF_EVENTS events. A thread
 * fills a buffer in place and hands it over with a SHM_EVENTS datagram; the
 * recorder reads it and frees it (it never writes to a buffer, so the lines
 * the probe writes next are not dirty in another core's cache). A thread
 * notes the tick count when it claims a buffer: when a process died without
 * handing a buffer over (SIGKILL), the recorder reads it up to the first
 * event stamped before that (left from the buffer's previous use) or empty. */
#define LAPSE_ARENA_BUFS 128
#define LAPSE_ARENA_HEAD 8192
#define LAPSE_ARENA_MAGIC 0x4150534cu /* "LSPA" */

enum lapse_slot_state {
    LAPSE_SLOT_FREE = 0,
    LAPSE_SLOT_FILLING = 1,  /* owned by thread `tid` */
    LAPSE_SLOT_QUEUED = 2,   /* handed over, the recorder has not freed it yet */
    LAPSE_SLOT_SPILLING = 3, /* the recorder is gone: being written to the spill file */
};

struct lapse_slot {
    uint32_t state;
    uint32_t tid;
    uint32_t count;   /* events, once queued */
    uint32_t pad;
    uint64_t first;   /* index of the thread's first event in this buffer */
    uint64_t stalled; /* the thread's hand-over ticks when it was queued */
    uint64_t seq;     /* hand-over order, for spilling in order */
    uint64_t claimed; /* ticks when the thread claimed the buffer */
};

struct lapse_arena {
    uint32_t magic;
    uint32_t nbufs;
    uint32_t gen;     /* futex word: bumped by the recorder whenever it frees buffers */
    uint32_t waiters; /* runtime threads waiting on gen */
    uint64_t seq;
    uint64_t reserved[5];
    struct lapse_slot slot[LAPSE_ARENA_BUFS];
};

_Static_assert(sizeof(struct lapse_arena) <= LAPSE_ARENA_HEAD, "arena header too big");
/* the recorder's mirror (protocol.rs) relies on this layout */
_Static_assert(sizeof(struct lapse_slot) == 48, "slot layout");
_Static_assert(__builtin_offsetof(struct lapse_arena, slot) == 64, "arena layout");

enum lapse_thread_state {
    LAPSE_T_NEW = 0,  /* zero-initialised TLS: the first probe sets it up */
    LAPSE_T_ACTIVE,   /* has a buffer */
    LAPSE_T_OFF,      /* not profiled (no recorder, thread ended, out of slots) */
};

/* Per-thread state, in initial-exec TLS. The probe touches only cur/end.
 * No buffer at all is base = cur = end = NULL (the next probe takes the slow path). */
struct lapse_tls {
    struct lapse_event *cur;
    struct lapse_event *end;
    uint64_t deadline;    /* ticks: hand the buffer over after this */
    struct lapse_event *base;
    uint64_t sent;        /* events of this thread already sent */
    uint64_t stalled;     /* ticks this thread spent handing buffers over */
    uint32_t tid;
    uint32_t state;
    uint32_t in_slow;     /* the slow path is running on this thread */
    uint32_t discard;     /* calibration: flushes are marked discard */
    uint32_t dtor_rounds; /* pthread key destructor calls so far */
    int32_t slot;         /* index in the thread registry, -1 if none */
    int32_t buf;          /* arena buffer in use, -1 for none or a private buffer */
    struct lapse_event *own; /* private buffer (when the arena has none to give) */
};

extern __thread struct lapse_tls lapse_t __attribute__((tls_model("initial-exec")));

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

/* runtime.c: called by the probe when the buffer is full, due or not set up;
 * `now` is the probe's tick reading. */
void lapse_slow_path(struct lapse_tls *t, void *fn, uint64_t is_exit, uint64_t now);
/* probe.c: median cost of one probe in ticks x 1024, measured through the real path. */
uint64_t lapse_measure_probe_cost(void);
/* runtime.c: hand every buffer over before the process image is replaced. */
void lapse_before_exec(void);

#endif
