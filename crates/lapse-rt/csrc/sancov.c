/* sancov.c - LLVM's sanitizer coverage as a probe source: `lapse build`
 * (rustc -C passes=sancov-module ... trace-pc-guard) and clang's
 * -fsanitize-coverage=func,trace-pc-guard.
 *
 * Such code calls __sanitizer_cov_trace_pc_guard(guard) once at the entry
 * of every function, after its prologue; there is no exit hook, so exits
 * come from the return trampoline (trampoline.c), as for -pg. The program
 * carries lapse's stub (sancov_stub.c): the hook is a jump through a
 * pointer that stays on an empty function unless this runtime is loaded,
 * and its module constructor hands the module's guards to
 * lapse_sancov_register, which numbers them and answers lapse_sancov_entry
 * (x86_64.S) as the new target.
 *
 * Where is the function's return address? The prologue has moved the stack
 * pointer by an amount only the unwind table knows. At the hook's call
 * site the table's CFA rule (a register plus an offset) gives the frame's
 * canonical address, and the return address lies just below it. The rule
 * is found once per guard, the first time its function runs, by reading
 * the module's .eh_frame_hdr and .eh_frame directly (memory reads only: no
 * lock, no allocation, so a first call inside a signal handler is as safe
 * as any), and kept by guard number; every later call reads it back.
 *
 * A function whose rule is neither "stack pointer + n" nor "frame pointer
 * + n" at the call (a CFA expression, realigned frames described
 * otherwise), or that has no unwind entry, is not recorded at all: an entry
 * without its exit would be worse than none.
 *
 * Not every call of the hook is a function's entry. The pass inserts one
 * call per function, but LLVM goes on optimising after it (rustc's ThinLTO
 * and LTO, a `-C passes` run before its inliner): a function inlined into
 * another takes its guard's call along, into the middle of the other one,
 * once per copy; and a function that does nothing else jumps to the hook
 * (`lea guard, %rdi; jmp hook`), so the hook returns straight into its
 * caller. Either way the hook's return address lies in another function.
 * Taken as an entry, such a call used to end its frame's call and start it
 * anew (a tail call, as the trampoline saw it): a loop that ran inlined
 * code made the function around it a call per iteration, one row per place.
 * So each call site is classified (`classify`, once per site and guard):
 * an entry is the first call of the hook in its function, within its first
 * ENTRY_WINDOW bytes; a guard whose function only jumps to the hook is that
 * function's call, returning where the hook does; any other site is code
 * inlined into the function that holds it, not a call: the recorder is
 * told once per such guard (LAPSE_MARK_NOT_ENTRY) and counts them. */
#define _GNU_SOURCE
#include "rt.h"

#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#define EXPORT __attribute__((no_instrument_function, visibility("default")))

#if defined(__x86_64__)

/* Guards numbered per process; numbers are never reused. The table is
 * reserved, not committed: only the pages of functions that ran count. */
#define MAX_GUARDS (1u << 22)
#define MAX_SANCOV_MODULES 256

enum {
    RULE_UNKNOWN = 0,
    RULE_SP = 1, /* return address at %rsp(at the call) + off */
    RULE_FP = 2, /* return address at %rbp + off */
    RULE_NONE = 3,
    RULE_TAIL = 4, /* its function jumps to the hook: the hook's own return address */
    RULE_BUSY = 5, /* being written (read as unknown) */
};

/* What the first entry of a guard's function found, for its later calls
 * from the same place. */
struct guard_rule {
    uint32_t rule;
    int32_t off;     /* from the register to the return address */
    uintptr_t fn;    /* the function (its start): what the events name */
    uintptr_t site;  /* the hook's return address there (not for RULE_TAIL) */
    uintptr_t other; /* the last place found not to be an entry (a hint) */
    uint32_t noted;  /* the recorder was told it fires away from an entry */
    uint32_t pad;
};

struct sancov_module {
    uintptr_t lo, hi;     /* its executable code */
    const uint8_t *hdr;   /* .eh_frame_hdr, or NULL */
    const uint32_t *start; /* its guards (identity) */
    const uint32_t *stop;
};

static struct guard_rule *g_rules;
static uint32_t g_next_guard = 1;
static struct sancov_module g_smods[MAX_SANCOV_MODULES];
static uint32_t g_nsmods;
static pthread_mutex_t g_sancov_lock = PTHREAD_MUTEX_INITIALIZER;

extern void lapse_sancov_entry(uint32_t *guard); /* x86_64.S */
int lapse_hook_enter_slow(struct lapse_hook *h);   /* trampoline.c */

/* ---- reading DWARF call frame information ---- */

struct reader {
    const uint8_t *p, *end;
    int bad;
};

NOINSTR static uint8_t rd_u8(struct reader *r)
{
    if (r->p >= r->end) {
        r->bad = 1;
        return 0;
    }
    return *r->p++;
}

NOINSTR static uint64_t rd_fixed(struct reader *r, unsigned n)
{
    if ((size_t)(r->end - r->p) < n) {
        r->bad = 1;
        r->p = r->end;
        return 0;
    }
    uint64_t v = 0;
    memcpy(&v, r->p, n); /* (little-endian) */
    r->p += n;
    return v;
}

NOINSTR static uint64_t rd_uleb(struct reader *r)
{
    uint64_t v = 0;
    for (unsigned shift = 0;; shift += 7) {
        uint8_t b = rd_u8(r);
        if (shift < 64)
            v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80) || r->bad)
            return v;
    }
}

NOINSTR static int64_t rd_sleb(struct reader *r)
{
    uint64_t v = 0;
    unsigned shift = 0;
    uint8_t b;
    do {
        b = rd_u8(r);
        if (shift < 64)
            v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
    } while ((b & 0x80) && !r->bad);
    if (shift < 64 && (b & 0x40))
        v |= ~(uint64_t)0 << shift;
    return (int64_t)v;
}

/* A pointer in DW_EH_PE encoding `enc`; `data` is the base of datarel. */
NOINSTR static uintptr_t rd_ptr(struct reader *r, uint8_t enc, uintptr_t data)
{
    if (enc == 0xff) /* DW_EH_PE_omit */
        return 0;
    uintptr_t at = (uintptr_t)r->p, v;
    switch (enc & 0x0f) {
    case 0x00: v = (uintptr_t)rd_fixed(r, 8); break;
    case 0x01: v = (uintptr_t)rd_uleb(r); break;
    case 0x02: v = (uintptr_t)rd_fixed(r, 2); break;
    case 0x03: v = (uintptr_t)rd_fixed(r, 4); break;
    case 0x04: v = (uintptr_t)rd_fixed(r, 8); break;
    case 0x09: v = (uintptr_t)rd_sleb(r); break;
    case 0x0a: v = (uintptr_t)(int64_t)(int16_t)rd_fixed(r, 2); break;
    case 0x0b: v = (uintptr_t)(int64_t)(int32_t)rd_fixed(r, 4); break;
    case 0x0c: v = (uintptr_t)rd_fixed(r, 8); break;
    default: r->bad = 1; return 0;
    }
    switch (enc & 0x70) {
    case 0x00: break;
    case 0x10: v += at; break;   /* pcrel */
    case 0x30: v += data; break; /* datarel */
    default: r->bad = 1; return 0;
    }
    if (enc & 0x80) /* indirect: not used for what is read here */
        r->bad = 1;
    return v;
}

/* One .eh_frame entry at p: its body and where it ends. */
NOINSTR static int entry_at(const uint8_t *p, const uint8_t *limit, struct reader *body,
                            uint32_t *id_at)
{
    struct reader r = {p, limit, 0};
    uint64_t len = rd_fixed(&r, 4);
    if (len == 0xffffffffu || len == 0 || r.bad)
        return 0; /* (64-bit lengths: not written for x86-64 code) */
    if ((size_t)(limit - r.p) < len)
        return 0;
    body->p = r.p;
    body->end = r.p + len;
    body->bad = 0;
    *id_at = (uint32_t)rd_fixed(body, 4);
    return !body->bad;
}

struct cfa {
    uint64_t reg;
    int64_t off;
};

/* Runs call frame instructions from r up to the row that covers `target`
 * (loc: the address the rows start at). Answers 0 on anything it cannot
 * follow for the CFA. */
NOINSTR static int run_cfi(struct reader *r, uint64_t code_align, int64_t data_align,
                           uintptr_t *loc, uintptr_t target, struct cfa *cfa,
                           struct cfa *stack, unsigned *depth)
{
    while (r->p < r->end && !r->bad) {
        uint8_t op = rd_u8(r);
        uint64_t adv = 0;
        switch (op >> 6) {
        case 1: adv = (op & 0x3f) * code_align; goto advance;
        case 2: (void)rd_uleb(r); continue;  /* offset */
        case 3: continue;                    /* restore */
        default: break;
        }
        switch (op) {
        case 0x00: continue; /* nop */
        case 0x02: adv = rd_fixed(r, 1) * code_align; goto advance;
        case 0x03: adv = rd_fixed(r, 2) * code_align; goto advance;
        case 0x04: adv = rd_fixed(r, 4) * code_align; goto advance;
        case 0x05: (void)rd_uleb(r); (void)rd_uleb(r); continue; /* offset_extended */
        case 0x06: case 0x07: case 0x08: (void)rd_uleb(r); continue;
        case 0x09: (void)rd_uleb(r); (void)rd_uleb(r); continue; /* register */
        case 0x0a: /* remember_state */
            if (*depth >= 8)
                return 0;
            stack[(*depth)++] = *cfa;
            continue;
        case 0x0b: /* restore_state */
            if (!*depth)
                return 0;
            *cfa = stack[--(*depth)];
            continue;
        case 0x0c: cfa->reg = rd_uleb(r); cfa->off = (int64_t)rd_uleb(r); continue;
        case 0x0d: cfa->reg = rd_uleb(r); continue;
        case 0x0e: cfa->off = (int64_t)rd_uleb(r); continue;
        case 0x0f: return 0; /* def_cfa_expression */
        case 0x10: case 0x16: { /* expression, val_expression */
            (void)rd_uleb(r);
            uint64_t n = rd_uleb(r);
            if ((uint64_t)(r->end - r->p) < n)
                return 0;
            r->p += n;
            continue;
        }
        case 0x11: case 0x15: (void)rd_uleb(r); (void)rd_sleb(r); continue;
        case 0x12: cfa->reg = rd_uleb(r); cfa->off = rd_sleb(r) * data_align; continue;
        case 0x13: cfa->off = rd_sleb(r) * data_align; continue;
        case 0x14: (void)rd_uleb(r); (void)rd_uleb(r); continue; /* val_offset */
        case 0x2e: (void)rd_uleb(r); continue;                    /* GNU_args_size */
        case 0x2f: (void)rd_uleb(r); (void)rd_uleb(r); continue;  /* GNU_negative_offset_ext */
        default: return 0;
        }
    advance:
        if (*loc + adv > target)
            return 1; /* the next row starts past the call */
        *loc += adv;
    }
    return !r->bad;
}

/* The CFA rule at `pc` (inside the hook's call instruction) from the
 * module's .eh_frame_hdr; 0 when there is none it can read. `begin` gets
 * the start of the function's unwind entry once one is found (with `out`
 * NULL, that is all it looks for). */
NOINSTR static int cfa_at(const uint8_t *hdr, uintptr_t pc, struct cfa *out, uintptr_t *begin_out)
{
    if (!hdr || hdr[0] != 1)
        return 0;
    uint8_t ptr_enc = hdr[1], count_enc = hdr[2], table_enc = hdr[3];
    struct reader r = {hdr + 4, hdr + 4 + 32, 0};
    uintptr_t base = (uintptr_t)hdr;
    (void)rd_ptr(&r, ptr_enc, base); /* .eh_frame itself: found per entry */
    uint64_t count = rd_ptr(&r, count_enc, base);
    if (r.bad || table_enc != 0x3b /* datarel sdata4: what linkers write */ || !count)
        return 0;
    const int32_t *table = (const int32_t *)r.p;
    /* the last entry starting at or before pc */
    uint64_t lo = 0, hi = count;
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (base + (intptr_t)table[2 * mid] <= pc)
            lo = mid;
        else
            hi = mid;
    }
    if (base + (intptr_t)table[2 * lo] > pc)
        return 0;
    const uint8_t *fde = (const uint8_t *)(base + (intptr_t)table[2 * lo + 1]);
    /* (entries are bounded by their own lengths; 16 MiB is a sanity bound) */
    const uint8_t *limit = fde + (16u << 20);
    struct reader f;
    uint32_t cie_delta;
    if (!entry_at(fde, limit, &f, &cie_delta) || !cie_delta)
        return 0;
    const uint8_t *cie = fde + 4 - cie_delta;
    struct reader c;
    uint32_t cie_id;
    if (!entry_at(cie, limit, &c, &cie_id) || cie_id != 0)
        return 0;
    uint8_t version = rd_u8(&c);
    const char *aug = (const char *)c.p;
    size_t auglen = strnlen(aug, (size_t)(c.end - c.p));
    if (auglen == (size_t)(c.end - c.p))
        return 0;
    c.p += auglen + 1;
    if (aug[0] && aug[0] != 'z')
        return 0;
    uint64_t code_align = rd_uleb(&c);
    int64_t data_align = rd_sleb(&c);
    if (version == 1)
        (void)rd_u8(&c);
    else
        (void)rd_uleb(&c);
    uint8_t fde_enc = 0; /* absptr */
    int has_aug_data = aug[0] == 'z';
    if (has_aug_data) {
        uint64_t n = rd_uleb(&c);
        const uint8_t *after = c.p + n;
        if (n > (uint64_t)(c.end - c.p))
            return 0;
        for (size_t i = 1; i < auglen; i++) {
            if (aug[i] == 'R')
                fde_enc = rd_u8(&c);
            else if (aug[i] == 'P')
                (void)rd_ptr(&c, rd_u8(&c) & 0x7f, 0);
            else if (aug[i] == 'L')
                (void)rd_u8(&c);
            else if (aug[i] != 'S' && aug[i] != 'B')
                break; /* (the length lets it be skipped) */
        }
        c.p = after;
    }
    uintptr_t begin = rd_ptr(&f, fde_enc, 0);
    uintptr_t range = rd_ptr(&f, fde_enc & 0x0f, 0);
    if (f.bad || c.bad || pc < begin || pc >= begin + range)
        return 0;
    *begin_out = begin;
    if (!out)
        return 1;
    if (has_aug_data) {
        uint64_t n = rd_uleb(&f);
        if (n > (uint64_t)(f.end - f.p))
            return 0;
        f.p += n;
    }
    struct cfa cfa = {7, 8}, stack[8];
    unsigned depth = 0;
    uintptr_t loc = begin;
    if (!run_cfi(&c, code_align, data_align, &loc, pc, &cfa, stack, &depth))
        return 0;
    loc = begin;
    if (!run_cfi(&f, code_align, data_align, &loc, pc, &cfa, stack, &depth))
        return 0;
    *out = cfa;
    return 1;
}

/* The rule for a function that called the hook from `pc`, into g's rule
 * and off. */
NOINSTR static void find_rule(const struct sancov_module *m, struct guard_rule *g, uintptr_t pc)
{
    struct cfa cfa;
    uintptr_t begin;
    g->rule = RULE_NONE;
    g->off = 0;
    /* (pc - 1: inside the call, whose row holds until it returns) */
    if (m && cfa_at(m->hdr, pc - 1, &cfa, &begin) && cfa.off >= 8 &&
        cfa.off < ((int64_t)1 << 30)) {
        if (cfa.reg == 7) /* %rsp */
            g->rule = RULE_SP;
        else if (cfa.reg == 6) /* %rbp */
            g->rule = RULE_FP;
        g->off = (int32_t)(cfa.off - 8); /* the return address sits just below */
    }
}

/* ---- which calls of the hook are entries ---- */

/* An entry's call of the hook comes after the prologue (pushes, the frame,
 * a stack probe, moves of the arguments): well within this many bytes of
 * the function's start. */
#define ENTRY_WINDOW 256

NOINSTR static const struct sancov_module *module_of(uintptr_t pc)
{
    uint32_t n = __atomic_load_n(&g_nsmods, __ATOMIC_ACQUIRE);
    const struct sancov_module *m = NULL;
    for (uint32_t i = 0; i < n; i++)
        if (pc >= g_smods[i].lo && pc < g_smods[i].hi)
            m = &g_smods[i];
    return m;
}

/* [a, a + n) lies in m's code (so it may be read). */
NOINSTR static int in_code(const struct sancov_module *m, uintptr_t a, size_t n)
{
    return a >= m->lo && a < m->hi && n <= m->hi - a;
}

NOINSTR static intptr_t rd_s32_at(uintptr_t a)
{
    int32_t v;
    memcpy(&v, (const void *)a, 4);
    return v;
}

/* The call instruction that ends at `end`, when it names where it goes:
 * CALL_REL (call rel32, *to: the target) or CALL_GOT (call *disp32(%rip),
 * *to: the pointer's address); CALL_NONE for anything else. */
enum { CALL_NONE = 0, CALL_REL = 5, CALL_GOT = 6 }; /* (their lengths) */

NOINSTR static int call_ending(const struct sancov_module *m, uintptr_t end, uintptr_t *to)
{
    const uint8_t *p = (const uint8_t *)end;
    if (in_code(m, end - 5, 5) && p[-5] == 0xe8) {
        *to = end + rd_s32_at(end - 4);
        return CALL_REL;
    }
    if (in_code(m, end - 6, 6) && p[-6] == 0xff && p[-5] == 0x15) {
        *to = end + rd_s32_at(end - 4);
        return CALL_GOT;
    }
    return CALL_NONE;
}

/* Past an endbr64 at p. */
NOINSTR static const uint8_t *skip_endbr(const uint8_t *p)
{
    return p[0] == 0xf3 && p[1] == 0x0f && p[2] == 0x1e && p[3] == 0xfa ? p + 4 : p;
}

/* The code at x is a jump through memory: the stub's
 * __sanitizer_cov_trace_pc_guard or a PLT entry for it. */
NOINSTR static int is_jump_slot(const struct sancov_module *m, uintptr_t x)
{
    if (!in_code(m, x, 16))
        return 0;
    const uint8_t *p = skip_endbr((const uint8_t *)x);
    if (p[0] == 0xf2) /* (bnd) */
        p++;
    return p[0] == 0xff && p[1] == 0x25;
}

/* The function at x is `lea guard(%rip), %rdi; jmp ...`: it does nothing
 * but hand this very guard to the hook. */
NOINSTR static int only_jumps_to_hook(const struct sancov_module *m, uintptr_t x,
                                      const uint32_t *guard)
{
    if (!in_code(m, x, 16))
        return 0;
    const uint8_t *p = skip_endbr((const uint8_t *)x);
    if (p[0] != 0x48 || p[1] != 0x8d || p[2] != 0x3d)
        return 0;
    uintptr_t loaded = (uintptr_t)p + 7 + rd_s32_at((uintptr_t)p + 3);
    return loaded == (uintptr_t)guard && (p[7] == 0xe9 || p[7] == 0xeb);
}

enum { SITE_ENTRY, SITE_TAIL, SITE_OTHER };

/* What the call of the hook that returns to `pc` with `guard` is (m: the
 * module whose code holds pc; begin: the start of the unwind entry that
 * holds pc, NULL when none does), and *fn the function whose call it is:
 * SITE_ENTRY, the first call of the hook in its function, near its start;
 * SITE_TAIL, a call of a function that only jumps to the hook (pc is in
 * its caller); SITE_OTHER, anything else (code inlined into the function
 * that holds pc, or a call this cannot read). Reads code only. */
NOINSTR static int classify_in(const struct sancov_module *m, const uint32_t *guard, uintptr_t pc,
                               const uintptr_t *start, uintptr_t *fn)
{
    uintptr_t to;
    int kind = call_ending(m, pc, &to);
    if (kind == CALL_REL && only_jumps_to_hook(m, to, guard)) {
        *fn = to;
        return SITE_TAIL;
    }
    /* a call of the hook is from the module whose guard it hands over */
    if (guard < m->start || guard >= m->stop || kind == CALL_NONE ||
        (kind == CALL_REL && !is_jump_slot(m, to)))
        return SITE_OTHER;
    if (!start) {
        *fn = pc; /* (no unwind entry: not recorded, see find_rule) */
        return SITE_ENTRY;
    }
    uintptr_t begin = *start, call = pc - (uintptr_t)kind;
    if (call < begin || call - begin > ENTRY_WINDOW)
        return SITE_OTHER;
    for (uintptr_t end = begin + (uintptr_t)kind; end <= call; end++) {
        uintptr_t x;
        if (call_ending(m, end, &x) == kind && x == to)
            return SITE_OTHER; /* an earlier call of the hook: that one is the entry */
    }
    *fn = begin;
    return SITE_ENTRY;
}

/* classify_in, with the function's start from the module's unwind table. */
NOINSTR static int classify(const struct sancov_module *m, const uint32_t *guard, uintptr_t pc,
                            uintptr_t *fn)
{
    uintptr_t begin;
    int found = cfa_at(m->hdr, pc - 1, NULL, &begin);
    return classify_in(m, guard, pc, found ? &begin : NULL, fn);
}

/* The recorder hears once of a guard that fired (at pc) as no call. */
NOINSTR static void note_guard(struct guard_rule *g, uintptr_t pc)
{
    uint32_t no = 0;
    if (__atomic_compare_exchange_n(&g->noted, &no, 1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        lapse_mark(LAPSE_MARK_NOT_ENTRY, pc);
}

/* `guard` fired at pc, which is no entry: its later calls from there are
 * passed over at once. */
NOINSTR static void not_an_entry(struct guard_rule *g, uintptr_t pc)
{
    __atomic_store_n(&g->other, pc, __ATOMIC_RELAXED);
    note_guard(g, pc);
}

/* Keeps `found` as g's rule if g has none yet (one writer at a time; a
 * reader sees the fields whole once the rule is there). */
NOINSTR static void publish(struct guard_rule *g, const struct guard_rule *found)
{
    uint32_t unknown = RULE_UNKNOWN;
    if (!__atomic_compare_exchange_n(&g->rule, &unknown, RULE_BUSY, 0, __ATOMIC_ACQUIRE,
                                     __ATOMIC_RELAXED))
        return;
    g->off = found->off;
    g->fn = found->fn;
    g->site = found->site;
    __atomic_store_n(&g->rule, found->rule, __ATOMIC_RELEASE);
}

/* ---- the hook ---- */

/* lapse_sancov_entry's C half: guard, the function's stack pointer at its
 * call of the hook, its frame pointer and the hook's return address. A
 * plain call for the function (its registers are its own to save). */
NOINSTR __attribute__((visibility("hidden"))) void
lapse_sancov_hook(uint32_t *guard, uintptr_t sp, uintptr_t fp, uintptr_t pc)
{
    uint32_t n = *guard;
    if (!n || n >= MAX_GUARDS || !g_rules)
        return;
    struct guard_rule *g = &g_rules[n];
    struct guard_rule r; /* the rule for this call */
    r.rule = __atomic_load_n(&g->rule, __ATOMIC_ACQUIRE);
    uintptr_t to;
    if ((r.rule == RULE_SP || r.rule == RULE_FP || r.rule == RULE_NONE) && pc == g->site) {
        r.off = g->off; /* its entry, as found the first time */
        r.fn = g->fn;
    } else if (pc == __atomic_load_n(&g->other, __ATOMIC_RELAXED)) {
        return; /* inlined code, as found before */
    } else {
        const struct sancov_module *m = module_of(pc);
        if (!m)
            return; /* (not a module that registered: nothing to read) */
        if (r.rule == RULE_TAIL && call_ending(m, pc, &to) == CALL_REL && to == g->fn) {
            r.fn = g->fn;
        } else {
            switch (classify(m, guard, pc, &r.fn)) {
            case SITE_TAIL:
                r.rule = RULE_TAIL;
                r.off = 0;
                r.site = 0;
                break;
            case SITE_ENTRY:
                find_rule(m, &r, pc);
                r.site = pc;
                break;
            default:
                not_an_entry(g, pc);
                return;
            }
            publish(g, &r); /* (a second entry, a clone of the function, is not kept) */
        }
    }
    uintptr_t at;
    if (r.rule == RULE_SP)
        at = sp + (uintptr_t)(intptr_t)r.off;
    else if (r.rule == RULE_FP)
        at = fp + (uintptr_t)(intptr_t)r.off;
    else if (r.rule == RULE_TAIL)
        at = sp - 8; /* (the function's return address is the hook's) */
    else
        return;
    if ((r.rule != RULE_TAIL && at < sp) || (at & 7))
        return; /* (not a slot of this stack: leave the call alone) */
    if (lapse_hook_owns((uintptr_t *)at, r.fn)) {
        /* this function's call is under way in this very frame: whatever
         * this site is, it is not a new call */
        note_guard(g, pc);
        return;
    }
    struct lapse_hook h;
    h.fn = r.fn; /* the function's start: one name, however it was reached */
    h.slot = (uintptr_t *)at;
    h.aux = 0;
    (void)lapse_hook_enter_slow(&h);
}

/* ---- registration (from each instrumented module's constructor) ---- */

struct find_arg {
    uintptr_t addr;
    struct sancov_module m;
    int found;
};

NOINSTR static int find_module(struct dl_phdr_info *info, size_t size, void *p)
{
    (void)size;
    struct find_arg *a = p;
    int mine = 0;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    const uint8_t *hdr = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t at = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && a->addr >= at && a->addr < at + ph->p_memsz)
            mine = 1;
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            lo = at < lo ? at : lo;
            hi = at + ph->p_memsz > hi ? at + ph->p_memsz : hi;
        }
        if (ph->p_type == PT_GNU_EH_FRAME)
            hdr = (const uint8_t *)at;
    }
    if (!mine)
        return 0;
    a->m.lo = lo;
    a->m.hi = hi;
    a->m.hdr = hdr;
    a->found = 1;
    return 1;
}

/* Numbers a module's guards and answers the hook's new target (NULL: leave
 * the module's hook empty). Modules call this once per object file that
 * has guards, all with the same range: the first call numbers them. */
EXPORT void *lapse_sancov_register(uint32_t *start, uint32_t *stop)
{
    if (!start || stop <= start)
        return NULL;
    pthread_mutex_lock(&g_sancov_lock);
    if (!g_rules) {
        void *m = mmap(NULL, (size_t)MAX_GUARDS * sizeof(struct guard_rule),
                       PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m != MAP_FAILED)
            __atomic_store_n(&g_rules, (struct guard_rule *)m, __ATOMIC_RELEASE);
    }
    /* (looked up every time: a module loaded where an unloaded one was has
     * the same guard addresses, but its own code and unwind table) */
    struct find_arg a = {(uintptr_t)start, {0, 0, NULL, start, stop}, 0};
    if (g_rules)
        dl_iterate_phdr(find_module, &a);
    if (a.found) {
        a.m.start = start;
        a.m.stop = stop;
        uint32_t i = 0;
        while (i < g_nsmods && g_smods[i].start != start)
            i++;
        if (i < g_nsmods) {
            g_smods[i] = a.m;
        } else if (g_nsmods < MAX_SANCOV_MODULES) {
            g_smods[g_nsmods] = a.m;
            __atomic_store_n(&g_nsmods, g_nsmods + 1, __ATOMIC_RELEASE);
        }
    }
    for (uint32_t *g = start; g < stop && g_rules; g++) {
        if (*g)
            continue;
        if (g_next_guard >= MAX_GUARDS)
            break; /* (more functions than that: the rest go unrecorded) */
        *g = g_next_guard++;
    }
    pthread_mutex_unlock(&g_sancov_lock);
    return g_rules ? (void *)lapse_sancov_entry : NULL;
}

#else

EXPORT void *lapse_sancov_register(uint32_t *start, uint32_t *stop)
{
    (void)start;
    (void)stop;
    return NULL;
}

#endif
