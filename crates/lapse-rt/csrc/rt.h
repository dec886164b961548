/* rt.h - what the runtime's C files share (the wire protocol is lapse_rt.h).
 *
 * The files: probe.c (the probe path), threads.c (per-thread buffers and the
 * slow path), arena.c (the buffer arena shared with the recorder), transport.c
 * (the connection and the spill file), lifecycle.c (start-up, fork, exec,
 * exit, fatal signals) and exec.c (the exec family, wrapped). */
#ifndef LAPSE_RT_INTERNAL_H
#define LAPSE_RT_INTERNAL_H

#include "lapse_rt.h"

#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#define NOINSTR __attribute__((no_instrument_function))
#define LAPSE_MAX_THREADS 4096
#define BUF_BYTES (LAPSE_BUF_EVENTS * sizeof(struct lapse_event))

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

/* ---- process-wide state (lifecycle.c) ---- */
extern int g_inited;          /* 0 never, 1 running, 2 disabled */
extern uint32_t g_pid;        /* pid of this process image */
extern uint64_t g_flush_ticks; /* hand-over period (LAPSE_FLUSH_TICKS) */
extern volatile int g_forking; /* between fork's prepare and after handlers */
uint32_t lapse_gettid(void);
void lapse_init(void);

/* ---- probe.c ---- */
/* Median cost of one probe in ticks x 1024, measured through the real path. */
uint64_t lapse_measure_probe_cost(void);

/* ---- threads.c ---- */
/* Called by the probe when the buffer is full, due or not set up; `now` is
 * the probe's tick reading. */
void lapse_slow_path(struct lapse_tls *t, void *fn, uint64_t is_exit, uint64_t now);
extern struct lapse_tls *g_threads[LAPSE_MAX_THREADS];
int lapse_threads_init(void);
/* The calling thread's buffer: hand it over and take the next one. */
void lapse_flush_own(struct lapse_tls *t);
/* Every thread's buffer, at exit, exec or a crash. */
void lapse_flush_all(void);
/* Sends [base, upto) of thread t as an EVENTS datagram. */
void lapse_send_events(struct lapse_tls *t, struct lapse_event *upto);

/* ---- arena.c ---- */
extern struct lapse_arena *g_arena; /* NULL: private buffers only */
extern int g_no_arena;
void lapse_arena_create(void);
/* Lets go of the parent's arena in a fork child. */
void lapse_arena_forget(void);
int lapse_take_buffer(struct lapse_tls *t);
void lapse_drop_buffer(struct lapse_tls *t);
void lapse_arena_hand_over(struct lapse_tls *t, uint32_t count);

/* ---- transport.c ---- */
extern int g_fd; /* connection to the recorder */
void lapse_connect(const char *path);
/* Sends one datagram (SCM_RIGHTS and all); -1 when the recorder is gone. */
int lapse_try_send(struct msghdr *mh);
/* Sends one message (and body), or appends it to the spill file. */
void lapse_send_msg(struct lapse_msg *m, const void *body, size_t body_len);
/* Appends a datagram made of iov[0..n) to the spill file. */
void lapse_spill(const struct iovec *iov, int n);
int lapse_recorder_gone(void);
void lapse_disconnect(void);

/* ---- exec.c / lifecycle.c ---- */
/* Hands every buffer over before the process image is replaced. */
void lapse_before_exec(void);

#endif
