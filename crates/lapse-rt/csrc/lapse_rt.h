/* lapse_rt.h - the wire protocol between the runtime and the recorder: the
 * datagrams, the events, the shared arena and the environment. The recorder's
 * mirror is src/protocol.rs; a unit test there reads this file and checks
 * every #define and LAPSE_AT/LAPSE_SIZE below against it, and the compiler
 * checks each LAPSE_AT/LAPSE_SIZE against the real layout. Nothing else
 * belongs here (the runtime's own declarations are in rt.h). */
#ifndef LAPSE_RT_H
#define LAPSE_RT_H

#include <stddef.h>
#include <stdint.h>

/* Layout pins: the number is what the recorder reads. */
#define LAPSE_AT(type, field, off) \
    _Static_assert(offsetof(struct type, field) == (off), #type "." #field " moved")
#define LAPSE_SIZE(type, size) _Static_assert(sizeof(struct type) == (size), #type " size")

/* ---- environment the recorder sets for the target ---- */
#define LAPSE_ENV_SOCKET "LAPSE_SOCKET"         /* the recorder's SOCK_SEQPACKET socket */
#define LAPSE_ENV_SPILL "LAPSE_SPILL"           /* where to append datagrams without a recorder */
#define LAPSE_ENV_CALIBRATE "LAPSE_CALIBRATE"   /* set: measure the probe cost (first process only) */
#define LAPSE_ENV_NO_ARENA "LAPSE_NO_ARENA"     /* set: private buffers only */
#define LAPSE_ENV_FLUSH_TICKS "LAPSE_FLUSH_TICKS" /* hand a buffer over after this many ticks */
#define LAPSE_ENV_NO_INHERIT "LAPSE_NO_INHERIT" /* set: children get neither the runtime nor these */
#define LAPSE_ENV_SPILL_MAX "LAPSE_SPILL_MAX"   /* the spill stops growing at this many bytes */
#define LAPSE_ENV_NO_LIBCALLS "LAPSE_NO_LIBCALLS" /* set: calls into other libraries are not traced */
#define LAPSE_ENV_SESSION "LAPSE_SESSION"       /* the recording's id (decimal), written in the spill */
#define LAPSE_ENV_PATCH_PLAN "LAPSE_PATCH_PLAN" /* the run-time patching plan for the executable (patch.c) */
#define LAPSE_ENV_BUFFERS "LAPSE_BUFFERS"       /* arena buffers a process may fill (1..LAPSE_ARENA_MAX_BUFS) */
#define LAPSE_ENV_FILTER "LAPSE_FILTER"         /* the record-time filter table (filter.c) */
#define LAPSE_ENV_PAUSED "LAPSE_PAUSED"         /* set: start paused (first process only; control.c) */
#define LAPSE_ENV_RESUME_NS "LAPSE_RESUME_NS"   /* CLOCK_MONOTONIC ns at which a paused start resumes */
#define LAPSE_ENV_SIGNAL "LAPSE_SIGNAL"         /* a signal number: each delivery toggles recording */
#define LAPSE_ENV_CONTROL_ONLY "LAPSE_CONTROL_ONLY" /* set: no events, only pause/resume/marks (sampling) */

/* ---- datagrams ---- */
#define LAPSE_MAGIC 0x3453504cu /* "LPS4" little-endian (24-byte events, leaf calls in one, 48-byte header) */

#define LAPSE_MSG_HELLO 1      /* a process (or a new exec image) starts */
#define LAPSE_MSG_EVENTS 2     /* a thread's events follow the header */
#define LAPSE_MSG_FORK 3       /* sent by the forking thread just before fork() */
#define LAPSE_MSG_CHILD 4      /* first message of a fork child */
#define LAPSE_MSG_EXEC 5       /* sent just before execve() */
#define LAPSE_MSG_ARENA 6      /* the process's shared arena; its memfd rides along (SCM_RIGHTS) */
#define LAPSE_MSG_SHM_EVENTS 7 /* a thread's events are in an arena buffer */
#define LAPSE_MSG_SESSION 8    /* (spill only) the recording the spill is for: each process's first */
#define LAPSE_MSG_CONTROL 9    /* pause, resume or a mark (its text follows the header) */

/* CONTROL ops. */
#define LAPSE_CONTROL_PAUSE 1
#define LAPSE_CONTROL_RESUME 2
#define LAPSE_CONTROL_MARK 3
#define LAPSE_CONTROL_SIGNAL_TAKEN 4 /* the program installed its own handler for the toggle signal */
#define LAPSE_MARK_TEXT_MAX 1024     /* longer mark texts are cut */

/* EVENTS / SHM_EVENTS flag: calibration events, the recorder drops them. */
#define LAPSE_FLAG_DISCARD 1

/* One 48-byte header per datagram; what follows `tid` depends on the kind,
 * `arena_seq` is every kind's. Ticks are the runtime's tick counter
 * (lapse_ticks()). */
struct lapse_msg {
    uint32_t magic;
    uint16_t kind;
    uint16_t flags;
    uint32_t pid;
    uint32_t tid;
    union {
        struct {
            uint64_t probe_cost; /* ticks x 1024 per probe; 0 when not measured */
            uint64_t ticks;      /* now */
            uint32_t ppid;
            uint32_t probe_spread; /* the calibration's 90th / 10th percentile, x100 */
        } hello;
        /* EVENTS (the events follow the header) and SHM_EVENTS (they are in
         * arena buffer `buf`; the datagram has no body) */
        struct {
            uint64_t first;   /* index of the thread's first event in this batch */
            uint64_t stalled; /* ticks the thread had spent in hand-overs before it */
            uint32_t count;
            uint32_t buf;
        } events;
        struct {
            uint64_t pad;
            uint64_t ticks; /* when the process was about to fork / exec */
        } fork, exec;
        struct {
            uint64_t pad;
            uint64_t fork_ticks; /* as in the parent's FORK */
            uint32_t ppid;
            uint32_t parent_tid;
        } child;
        struct {
            uint64_t bytes;
            uint64_t pad;
            uint32_t bufs;
            uint32_t buf_events;
        } arena;
        struct {
            uint64_t id; /* LAPSE_SESSION */
        } session;
        struct {
            uint32_t op;    /* LAPSE_CONTROL_* */
            uint32_t len;   /* bytes of mark text after the header */
            uint64_t ticks; /* when */
            uint64_t stalled; /* ticks the thread had spent in hand-overs by then */
        } control;
    } u;
    /* Buffers of the sender's current arena handed over before this was
     * sent (its `seq` then): the recorder reads the buffers handed over
     * quietly (LAPSE_SLOT_QUIET) with a lower `seq` before this datagram,
     * and none with a higher one. Set when the datagram is sent. */
    uint64_t arena_seq;
};

LAPSE_SIZE(lapse_msg, 48);
LAPSE_AT(lapse_msg, magic, 0);
LAPSE_AT(lapse_msg, kind, 4);
LAPSE_AT(lapse_msg, flags, 6);
LAPSE_AT(lapse_msg, pid, 8);
LAPSE_AT(lapse_msg, tid, 12);
LAPSE_AT(lapse_msg, u.hello.probe_cost, 16);
LAPSE_AT(lapse_msg, u.hello.ticks, 24);
LAPSE_AT(lapse_msg, u.hello.ppid, 32);
LAPSE_AT(lapse_msg, u.hello.probe_spread, 36);
LAPSE_AT(lapse_msg, u.events.first, 16);
LAPSE_AT(lapse_msg, u.events.stalled, 24);
LAPSE_AT(lapse_msg, u.events.count, 32);
LAPSE_AT(lapse_msg, u.events.buf, 36);
LAPSE_AT(lapse_msg, u.fork.ticks, 24);
LAPSE_AT(lapse_msg, u.exec.ticks, 24);
LAPSE_AT(lapse_msg, u.child.fork_ticks, 24);
LAPSE_AT(lapse_msg, u.child.ppid, 32);
LAPSE_AT(lapse_msg, u.child.parent_tid, 36);
LAPSE_AT(lapse_msg, u.arena.bytes, 16);
LAPSE_AT(lapse_msg, u.session.id, 16);
LAPSE_AT(lapse_msg, u.arena.bufs, 32);
LAPSE_AT(lapse_msg, u.arena.buf_events, 36);
LAPSE_AT(lapse_msg, u.control.op, 16);
LAPSE_AT(lapse_msg, u.control.len, 20);
LAPSE_AT(lapse_msg, u.control.ticks, 24);
LAPSE_AT(lapse_msg, u.control.stalled, 32);
LAPSE_AT(lapse_msg, arena_seq, 40);

/* One probe firing: the function's address, (ticks << 1 | is_exit), and
 * where its frame is on the stack: for the trampoline's probe sources the
 * slot of the call's return address, for -finstrument-functions the stack
 * pointer at the probe's call. A frame whose `sp` lies at or below the `sp`
 * of a later entry is gone (longjmp, an exception through code without
 * exit probes): the recorder closes it then.
 *
 * A slot whose probe never wrote it (abandoned by a longjmp out of a signal
 * handler) is handed over as a hole: fn == LAPSE_HOLE_FN, counted as lost.
 * Other `fn` values below LAPSE_MARK_LIMIT are markers, not functions. */
#define LAPSE_HOLE_FN 0
#define LAPSE_MARK_UNWIND 1    /* sp: every frame whose sp lies below it is gone (longjmp, catch) */
#define LAPSE_MARK_UNTRACED 2  /* the thread stopped installing trampolines (too deep) */
#define LAPSE_MARK_SWITCH 3    /* sp: swapcontext called from there: the open call whose frame
                                  is there is a barrier to the sp rule until it returns */
#define LAPSE_MARK_NOT_ENTRY 4 /* sp: where a sanitizer-coverage guard fired away from its function's
                                  entry (inlined code): not a call; once per guard (sancov.c) */
#define LAPSE_MARK_DROPPED 5   /* --min-time: sp = function | calls << 48, calls of the function
                                  dropped as too short (filter.c); stamp: the first one's entry */
#define LAPSE_MARK_LIMIT 4096
/* A leaf call in one slot: an exit whose thread's last slot is its own
 * call's entry (same fn and sp, nothing recorded in between) is written into
 * that slot instead of a new one: bit 63 of the entry's sp set, bits 47-62
 * the ticks from the entry to the exit (1 to LAPSE_LEAF_MAX_TICKS). Only
 * for a sp below 2^47 (every user stack unless a program maps one higher
 * on a 5-level-paging machine), in a function's slot (fn >= LAPSE_MARK_LIMIT:
 * markers keep their sp as it is). Half the slots for leaf calls, which
 * are most calls of call-heavy programs: half the bytes the recorder reads
 * from the thread's core, and half its work for them. */
#define LAPSE_LEAF_BIT 0x8000000000000000ull
#define LAPSE_LEAF_SHIFT 47
#define LAPSE_LEAF_MAX_TICKS 0xffffull
/* A function's slot without LAPSE_LEAF_BIT whose sp has this bit: an entry
 * sealed by a hand-over while a leaf exit was being written into it (the
 * exit went to a slot of its own). Its sp is the rest. */
#define LAPSE_SEAL_BIT 0x4000000000000000ull
struct lapse_event {
    uint64_t fn;
    uint64_t stamp;
    uint64_t sp;
};

LAPSE_SIZE(lapse_event, 24);
LAPSE_AT(lapse_event, fn, 0);
LAPSE_AT(lapse_event, stamp, 8);
LAPSE_AT(lapse_event, sp, 16);

/* A thread buffer is 64 KiB (so the probe finds its end from a slot's
 * address, rt.h): 2730 slots of 24 bytes, of which the runtime fills at
 * most 2560 (the last page is a guard), so a datagram holds at most that. */
#define LAPSE_BUF_BYTES 65536
#define LAPSE_BUF_EVENTS 2730
_Static_assert(LAPSE_BUF_EVENTS == LAPSE_BUF_BYTES / sizeof(struct lapse_event), "slots per buffer");

/* ---- the shared arena ----
 * One memfd per process image, mapped by the runtime and (through the fd
 * passed in ARENA) by the recorder. A header of slot states, then
 * LAPSE_ARENA_BUFS buffers of LAPSE_BUF_BYTES (LAPSE_BUF_EVENTS events). A thread fills a
 * buffer in place and hands it over with a SHM_EVENTS datagram, or, while
 * the recorder says it is `reading` the arena, by the slot's state alone
 * (QUIET: no datagram, no system call; arena.c); the recorder reads it and
 * frees it (it never writes to a buffer, so the lines the probe
 * writes next are not dirty in another core's cache). A thread notes the tick
 * count when it claims a buffer: when a process died without handing a buffer
 * over (SIGKILL), the recorder reads it up to the first event stamped before
 * that (left from the buffer's previous use) or empty. */
#define LAPSE_ARENA_MAGIC 0x4150534cu /* "LSPA" */
/* How many buffers an arena has is chosen at start-up (LAPSE_ENV_BUFFERS,
 * default LAPSE_ARENA_BUFS, 16 MiB; at most 64 MiB): the memfd is that big, but a page takes
 * memory only once written, and threads claim the lowest free buffer, so the
 * arena grows into its bound only while the recorder is behind. */
#define LAPSE_ARENA_MAX_BUFS 1024
#define LAPSE_ARENA_BUFS 256
#define LAPSE_ARENA_HEAD 65536 /* buffers start 64 KiB-aligned */

#define LAPSE_SLOT_FREE 0
#define LAPSE_SLOT_FILLING 1  /* owned by thread `tid` */
#define LAPSE_SLOT_QUEUED 2   /* handed over, the recorder has not freed it yet */
#define LAPSE_SLOT_SPILLING 3 /* the recorder is gone: being written to the spill file */
#define LAPSE_SLOT_QUIET 4    /* handed over without a datagram (the recorder was reading) */
#define LAPSE_SLOT_TAKEN 5    /* a quiet buffer the recorder took to read */

struct lapse_slot {
    uint32_t state;
    uint32_t tid;
    uint32_t count;   /* events, once queued */
    uint32_t flags;   /* LAPSE_FLAG_DISCARD for calibration events */
    uint64_t first;   /* index of the thread's first event in this buffer */
    uint64_t stalled; /* the thread's hand-over ticks when it was queued */
    uint64_t seq;     /* hand-over order (spilling; quiet buffers against datagrams) */
    uint64_t claimed; /* ticks when the thread claimed the buffer */
};

struct lapse_arena {
    uint32_t magic;
    uint32_t nbufs;
    uint32_t gen;     /* futex word: bumped by the recorder whenever it frees buffers */
    uint32_t waiters; /* runtime threads waiting on gen */
    uint64_t seq;     /* buffers handed over (the recorder watches it while it spins) */
    uint32_t reading; /* set by the recorder while it is awake: hand buffers over quietly */
    uint32_t high;    /* 1 + the highest buffer index ever claimed: the recorder looks below it */
    uint64_t received; /* datagrams the recorder has read from this process's connection */
    /* The recorder's CLOCK_MONOTONIC nanoseconds at its last look at an
     * arena whose connection is gone while its process lives (the program
     * closed every descriptor, or a seccomp filter forbids sendmsg): while
     * recent, buffers handed over stay here for it to read (arena.c). */
    uint64_t heartbeat;
    /* Events the runtime could neither send, spill nor leave here, that no
     * later buffer of their thread shows as a gap in its numbering. */
    uint64_t undelivered;
    int32_t cut_errno; /* why the last connection or spill could not be opened */
    uint32_t pad2;
    struct lapse_slot slot[LAPSE_ARENA_MAX_BUFS];
};

LAPSE_SIZE(lapse_slot, 48);
LAPSE_AT(lapse_slot, state, 0);
LAPSE_AT(lapse_slot, tid, 4);
LAPSE_AT(lapse_slot, count, 8);
LAPSE_AT(lapse_slot, flags, 12);
LAPSE_AT(lapse_slot, first, 16);
LAPSE_AT(lapse_slot, stalled, 24);
LAPSE_AT(lapse_slot, seq, 32);
LAPSE_AT(lapse_slot, claimed, 40);
LAPSE_AT(lapse_arena, magic, 0);
LAPSE_AT(lapse_arena, nbufs, 4);
LAPSE_AT(lapse_arena, gen, 8);
LAPSE_AT(lapse_arena, waiters, 12);
LAPSE_AT(lapse_arena, seq, 16);
LAPSE_AT(lapse_arena, reading, 24);
LAPSE_AT(lapse_arena, high, 28);
LAPSE_AT(lapse_arena, received, 32);
LAPSE_AT(lapse_arena, heartbeat, 40);
LAPSE_AT(lapse_arena, undelivered, 48);
LAPSE_AT(lapse_arena, cut_errno, 56);
LAPSE_AT(lapse_arena, slot, 64);
_Static_assert(sizeof(struct lapse_arena) <= LAPSE_ARENA_HEAD, "arena header too big");

/* ---- record-time filters: the table file (LAPSE_ENV_FILTER, filter.c) ----
 * The recorder matches --filter and --exclude against the executable's
 * symbols and writes the header, then `ranges` ranges sorted by start and
 * not overlapping, relative to the executable's load bias (any ASLR). The
 * runtime applies it to that executable (dev, ino) only. */
#define LAPSE_FILTER_MAGIC 0x544c4946u /* "FILT" little-endian */
#define LAPSE_FILTER_ON 1              /* header flag: --filter: only matches and their callees */
#define LAPSE_FILTER_MATCH 1           /* range flag: matches --filter */
#define LAPSE_FILTER_EXCLUDE 2         /* range flag: matches --exclude (the function alone is left out) */
#define LAPSE_FILTER_MAX_DEPTH 64      /* --depth at most this (the per-thread stack of kept frames) */

struct lapse_filter_header {
    uint32_t magic;
    uint32_t ranges;    /* range records after the header */
    uint64_t dev;       /* the executable the table is for (st_dev, st_ino) */
    uint64_t ino;
    uint32_t flags;     /* LAPSE_FILTER_ON */
    uint32_t depth;     /* --depth: frames kept per thread below the first (0: any) */
    uint64_t min_ticks; /* --min-time in ticks (0: none) */
};

struct lapse_filter_range {
    uint64_t start; /* [start, end) minus the load bias */
    uint64_t end;
    uint32_t flags; /* LAPSE_FILTER_MATCH | LAPSE_FILTER_EXCLUDE */
    uint32_t pad;
};

LAPSE_SIZE(lapse_filter_header, 40);
LAPSE_AT(lapse_filter_header, magic, 0);
LAPSE_AT(lapse_filter_header, ranges, 4);
LAPSE_AT(lapse_filter_header, dev, 8);
LAPSE_AT(lapse_filter_header, ino, 16);
LAPSE_AT(lapse_filter_header, flags, 24);
LAPSE_AT(lapse_filter_header, depth, 28);
LAPSE_AT(lapse_filter_header, min_ticks, 32);
LAPSE_SIZE(lapse_filter_range, 24);
LAPSE_AT(lapse_filter_range, start, 0);
LAPSE_AT(lapse_filter_range, end, 8);
LAPSE_AT(lapse_filter_range, flags, 16);

/* ---- run-time patching: the plan files (LAPSE_ENV_PATCH_PLAN, patch.c) ----
 * The recorder decodes a module's functions (the executable's, or a shared
 * library's that --patch names) and writes, for a stub region at a fixed
 * distance from the module's load bias, every stub (hook call, relocated
 * prologue, jump back) and every patch site. All addresses are relative
 * to the load bias, so the plan holds whatever address ASLR picks. When
 * the region cannot be mapped there (a library has others right below
 * it), the runtime maps it elsewhere within reach and moves each fixup
 * field by the difference. LAPSE_ENV_PATCH_PLAN is a prefix P: the plans
 * are P.0, P.1, ... A file: the header, `region_bytes` of stubs, `sites`
 * site records, then `fixups` words (an offset in the region; bit 31 set
 * for an int64 field, else an int32 one). */
#define LAPSE_PLAN_MAGIC 0x4e4c5050u /* "PPLN" little-endian */
#define LAPSE_PLAN_JMP 5             /* bytes of the jmp rel32 written at a site */
#define LAPSE_PLAN_ORIG 19           /* most bytes a site displaces (4 + 15) */
#define LAPSE_PLAN_FIXUP64 0x80000000u
#define LAPSE_PLAN_MAX 64            /* plan files P.0 ... P.63 at most */

struct lapse_plan_header {
    uint32_t magic;
    uint32_t sites;        /* site records after the stubs */
    uint64_t dev;          /* the module the plan is for (st_dev, st_ino) */
    uint64_t ino;
    int64_t region;        /* the stub region's address minus the load bias */
    uint64_t region_bytes; /* stub bytes after this header */
    uint64_t entry_slot;   /* offset in the region of the word for lapse_patch_entry
                            * (the next word: lapse_patch_unwind, for the
                            * entries of a program's own unwinder) */
    uint32_t fixups;       /* fixup words after the sites */
    uint32_t flags;        /* (none yet: 0) */
};

struct lapse_plan_site {
    uint64_t at;                     /* the site's address minus the load bias */
    uint32_t stub;                   /* its stub's offset in the region */
    uint8_t len;                     /* bytes displaced (LAPSE_PLAN_JMP or more) */
    uint8_t orig[LAPSE_PLAN_ORIG];   /* what must be there before patching */
};

LAPSE_SIZE(lapse_plan_header, 56);
LAPSE_AT(lapse_plan_header, magic, 0);
LAPSE_AT(lapse_plan_header, sites, 4);
LAPSE_AT(lapse_plan_header, dev, 8);
LAPSE_AT(lapse_plan_header, ino, 16);
LAPSE_AT(lapse_plan_header, region, 24);
LAPSE_AT(lapse_plan_header, region_bytes, 32);
LAPSE_AT(lapse_plan_header, entry_slot, 40);
LAPSE_AT(lapse_plan_header, fixups, 48);
LAPSE_SIZE(lapse_plan_site, 32);
LAPSE_AT(lapse_plan_site, at, 0);
LAPSE_AT(lapse_plan_site, stub, 8);
LAPSE_AT(lapse_plan_site, len, 12);
LAPSE_AT(lapse_plan_site, orig, 13);

/* ---- one constructor per message kind ---- */

static inline struct lapse_msg lapse_msg_head(uint16_t kind, uint32_t pid, uint32_t tid)
{
    struct lapse_msg m;
    __builtin_memset(&m, 0, sizeof m);
    m.magic = LAPSE_MAGIC;
    m.kind = kind;
    m.pid = pid;
    m.tid = tid;
    return m;
}

static inline struct lapse_msg lapse_msg_hello(uint32_t pid, uint32_t tid, uint64_t probe_cost,
                                               uint32_t probe_spread, uint64_t ticks,
                                               uint32_t ppid)
{
    struct lapse_msg m = lapse_msg_head(LAPSE_MSG_HELLO, pid, tid);
    m.u.hello.probe_cost = probe_cost;
    m.u.hello.probe_spread = probe_spread;
    m.u.hello.ticks = ticks;
    m.u.hello.ppid = ppid;
    return m;
}

/* EVENTS: `count` events follow the header in the same datagram. */
static inline struct lapse_msg lapse_msg_events(uint32_t pid, uint32_t tid, uint64_t first,
                                                uint64_t stalled, uint32_t count, int discard)
{
    struct lapse_msg m = lapse_msg_head(LAPSE_MSG_EVENTS, pid, tid);
    m.flags = discard ? LAPSE_FLAG_DISCARD : 0;
    m.u.events.first = first;
    m.u.events.stalled = stalled;
    m.u.events.count = count;
    return m;
}

static inline struct lapse_msg lapse_msg_shm_events(uint32_t pid, uint32_t tid, uint64_t first,
                                                    uint64_t stalled, uint32_t count,
                                                    uint32_t buf, int discard)
{
    struct lapse_msg m = lapse_msg_events(pid, tid, first, stalled, count, discard);
    m.kind = LAPSE_MSG_SHM_EVENTS;
    m.u.events.buf = buf;
    return m;
}

static inline struct lapse_msg lapse_msg_fork(uint32_t pid, uint32_t tid, uint64_t ticks)
{
    struct lapse_msg m = lapse_msg_head(LAPSE_MSG_FORK, pid, tid);
    m.u.fork.ticks = ticks;
    return m;
}

static inline struct lapse_msg lapse_msg_child(uint32_t pid, uint32_t tid, uint64_t fork_ticks,
                                               uint32_t ppid, uint32_t parent_tid)
{
    struct lapse_msg m = lapse_msg_head(LAPSE_MSG_CHILD, pid, tid);
    m.u.child.fork_ticks = fork_ticks;
    m.u.child.ppid = ppid;
    m.u.child.parent_tid = parent_tid;
    return m;
}

static inline struct lapse_msg lapse_msg_exec(uint32_t pid, uint32_t tid, uint64_t ticks)
{
    struct lapse_msg m = lapse_msg_head(LAPSE_MSG_EXEC, pid, tid);
    m.u.exec.ticks = ticks;
    return m;
}

/* ARENA: the arena's memfd travels with it (SCM_RIGHTS). */
static inline struct lapse_msg lapse_msg_arena(uint32_t pid, uint32_t tid, uint64_t bytes,
                                               uint32_t bufs, uint32_t buf_events)
{
    struct lapse_msg m = lapse_msg_head(LAPSE_MSG_ARENA, pid, tid);
    m.u.arena.bytes = bytes;
    m.u.arena.bufs = bufs;
    m.u.arena.buf_events = buf_events;
    return m;
}

static inline struct lapse_msg lapse_msg_session(uint32_t pid, uint32_t tid, uint64_t id)
{
    struct lapse_msg m = lapse_msg_head(LAPSE_MSG_SESSION, pid, tid);
    m.u.session.id = id;
    return m;
}

/* CONTROL: `len` bytes of mark text follow the header. */
static inline struct lapse_msg lapse_msg_control(uint32_t pid, uint32_t tid, uint32_t op,
                                                 uint64_t ticks, uint64_t stalled, uint32_t len)
{
    struct lapse_msg m = lapse_msg_head(LAPSE_MSG_CONTROL, pid, tid);
    m.u.control.stalled = stalled;
    m.u.control.op = op;
    m.u.control.len = len;
    m.u.control.ticks = ticks;
    return m;
}

#endif
