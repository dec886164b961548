/* patch.c - run-time patching of modules built without probes: the runtime
 * applies the plans the recorder computed (lapse-record, instrument/patch):
 * the executable's and the shared libraries' it has loaded in its
 * constructor, before the program's own constructors and main run, while
 * only this thread exists; a library loaded later by dlopen after that
 * dlopen returned, at the first hook that follows it on the thread that
 * called it (trampoline.c's rescan).
 *
 * A plan (lapse_rt.h, struct lapse_plan_header) holds finished stubs for a
 * region at a fixed distance from its module's load bias, and the sites to
 * patch with a jmp rel32 to them. Everything position-dependent was settled
 * by the recorder (a real decoder and encoder relocated the displaced
 * instructions); this file only finds the module the plan is for (device
 * and inode), maps the region (where planned, else the nearest free place
 * within reach, moving the plan's fixup fields by the difference), copies
 * the stubs in and writes the jumps. A site whose bytes are not the ones
 * the plan expects is left alone, and if the region cannot be mapped
 * nothing of that module is patched: it runs as built. What was done goes
 * to a file beside each plan (".done", written by the first process only),
 * which the recorder reports.
 *
 * Other threads. Writing a 5-byte jump is not atomic, and a thread could be
 * executing the bytes it replaces. In the constructor only this thread
 * exists (else nothing is patched). After a dlopen others may run, but not
 * yet in the new library's functions: the program has not had its handle
 * (this runs before the calling thread's next library call, dlsym
 * included), so only code its constructors handed to another thread could
 * be there. Then each jump is written with one 16-byte atomic store (lock
 * cmpxchg16b) over the aligned block that holds it, so a thread that
 * arrives at the site sees the old bytes or the new ones, never a mix; a
 * site whose jump would cross a 16-byte block is left alone ("racy"). A
 * thread inside the displaced instructions at that very moment is the one
 * case this cannot rule out (see docs/semantics.md).
 *
 * Not on any probe path: this runs once per module and process image. */
#define _GNU_SOURCE
#include "rt.h"

#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

/* Patched modules' program headers (libcalls.c: their calls into other
 * libraries are traced as an instrumented module's). */
#define MAX_PATCHED 64
static const void *g_patched[MAX_PATCHED];
static int g_npatched;

NOINSTR int lapse_is_patched(const void *phdr)
{
    int n = __atomic_load_n(&g_npatched, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (g_patched[i] == phdr)
            return 1;
    return 0;
}

#if defined(__x86_64__)

extern void lapse_patch_entry(void);
extern void lapse_patch_unwind(void);

/* How far the region may be from where it was planned. */
#define MOVE_STEP (1ul << 20)
#define MOVE_TRIES 1024

struct plan {
    const struct lapse_plan_header *h;
    size_t len;
    const uint8_t *stubs;
    const struct lapse_plan_site *sites;
    const uint32_t *fixups;
    int n;              /* the file's number (P.n) */
    const void *phdr;   /* the module image it was applied to (0: none yet) */
};

static struct plan g_plans[LAPSE_PLAN_MAX];
static int g_nplans;
static char g_prefix[4000];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

struct module {
    uintptr_t bias;
    const ElfW(Phdr) *ph;
    size_t n;
    uint64_t dev, ino; /* (0, 0: its file is not known) */
};

#define MAX_MODULES 512
struct modules {
    struct module m[MAX_MODULES];
    int n;
};

NOINSTR static int note_module(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct modules *ms = data;
    if (ms->n >= MAX_MODULES)
        return 1;
    struct module *m = &ms->m[ms->n++];
    m->bias = info->dlpi_addr;
    m->ph = info->dlpi_phdr;
    m->n = info->dlpi_phnum;
    /* (the first object is the main program, named "") */
    const char *name = ms->n == 1 ? "/proc/self/exe" : info->dlpi_name;
    struct stat st;
    m->dev = m->ino = 0;
    if (name && *name && stat(name, &st) == 0) {
        m->dev = (uint64_t)st.st_dev;
        m->ino = (uint64_t)st.st_ino;
    }
    return 0;
}

NOINSTR static int prot_of(uint32_t flags)
{
    return (flags & PF_R ? PROT_READ : 0) | (flags & PF_W ? PROT_WRITE : 0) |
           (flags & PF_X ? PROT_EXEC : 0);
}

/* Says what was done with plan `p`, once per recording (the first process
 * to get here). */
NOINSTR static void report(const struct plan *p, unsigned patched, unsigned changed,
                           unsigned racy, const char *why)
{
    char path[4096 + 32], text[256];
    if ((size_t)snprintf(path, sizeof path, "%s.%d.done", g_prefix, p->n) >= sizeof path)
        return;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return;
    int n = snprintf(text, sizeof text, "patched %u\nchanged %u\nracy %u\nfailed %s\n", patched,
                     changed, racy, why ? why : "-");
    if (n > 0)
        (void)!write(fd, text, (size_t)n);
    close(fd);
}

/* The process's threads (/proc/self/stat's 20th field), 0 if unknown. */
NOINSTR static long threads_now(void)
{
    char buf[1024];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* (the command may hold spaces) */
    for (int field = 2; p && field < 20; field++)
        p = strchr(p + 1, ' ');
    return p ? strtol(p + 1, NULL, 10) : 0;
}

/* Replaces the aligned 16 bytes at `p` holding `old` with `new`, in one
 * atomic store; 0 if they held something else. */
NOINSTR static int swap16(void *p, const uint8_t old[16], const uint8_t new[16])
{
    uint64_t lo, hi, nlo, nhi;
    memcpy(&lo, old, 8);
    memcpy(&hi, old + 8, 8);
    memcpy(&nlo, new, 8);
    memcpy(&nhi, new + 8, 8);
    unsigned char ok;
    __asm__ volatile("lock cmpxchg16b %1\n\tsete %0"
                     : "=q"(ok), "+m"(*(volatile uint64_t(*)[2])p), "+a"(lo), "+d"(hi)
                     : "b"(nlo), "c"(nhi)
                     : "memory", "cc");
    return ok;
}

/* Writes the jumps of `p`'s sites in one executable segment of `m`;
 * returns how many. `alone`: no other thread runs. */
NOINSTR static unsigned patch_segment(const struct module *m, const ElfW(Phdr) *ph,
                                      const struct plan *p, uintptr_t region, int alone,
                                      unsigned *changed, unsigned *racy)
{
    const struct lapse_plan_header *h = p->h;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uint64_t from = ph->p_vaddr, to = ph->p_vaddr + ph->p_memsz;
    unsigned mine = 0, done = 0;
    for (uint32_t i = 0; i < h->sites; i++)
        mine += p->sites[i].at >= from && p->sites[i].at + p->sites[i].len <= to;
    if (!mine)
        return 0;
    uintptr_t lo = (m->bias + from) & ~(page - 1);
    uintptr_t hi = (m->bias + to + page - 1) & ~(page - 1);
    /* (writable as well: a thread running this code meanwhile is not stopped) */
    if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE | PROT_EXEC) != 0)
        return 0;
    for (uint32_t i = 0; i < h->sites; i++) {
        const struct lapse_plan_site *s = &p->sites[i];
        if (!(s->at >= from && s->at + s->len <= to))
            continue;
        uint8_t *at = (uint8_t *)(m->bias + s->at);
        int64_t rel = (int64_t)(region + s->stub) - (int64_t)(uintptr_t)at - LAPSE_PLAN_JMP;
        if (s->len < LAPSE_PLAN_JMP || s->len > LAPSE_PLAN_ORIG || rel != (int32_t)rel ||
            memcmp(at, s->orig, s->len) != 0) {
            (*changed)++; /* not the code the plan was made for */
            continue;
        }
        uint8_t jmp[LAPSE_PLAN_JMP] = {0xe9};
        int32_t rel32 = (int32_t)rel;
        memcpy(jmp + 1, &rel32, 4);
        if (alone) {
            memcpy(at, jmp, LAPSE_PLAN_JMP);
            /* the rest of the displaced bytes: no branch goes there (the
             * plan checked), so int3 makes a wrong one loud, not silent */
            memset(at + LAPSE_PLAN_JMP, 0xcc, s->len - LAPSE_PLAN_JMP);
            done++;
            continue;
        }
        uint8_t *block = (uint8_t *)((uintptr_t)at & ~(uintptr_t)15);
        size_t off = (size_t)(at - block);
        if (off + LAPSE_PLAN_JMP > 16) {
            (*racy)++;
            continue;
        }
        uint8_t old[16], new[16];
        memcpy(old, block, 16);
        memcpy(new, old, 16);
        memcpy(new + off, jmp, LAPSE_PLAN_JMP);
        if (swap16(block, old, new))
            done++;
        else
            (*changed)++;
    }
    mprotect((void *)lo, hi - lo, prot_of(ph->p_flags));
    return done;
}

/* Maps `p`'s region for module `m`, where planned or else within reach,
 * stubs in place and fixups moved; its address, or 0. */
NOINSTR static uintptr_t map_region(const struct plan *p, const struct module *m, size_t len)
{
    const struct lapse_plan_header *h = p->h;
    uintptr_t want = m->bias + (uintptr_t)h->region;
    uintptr_t hi = 0;
    for (size_t i = 0; i < m->n; i++)
        if (m->ph[i].p_type == PT_LOAD && m->bias + m->ph[i].p_vaddr + m->ph[i].p_memsz > hi)
            hi = m->bias + m->ph[i].p_vaddr + m->ph[i].p_memsz;
    for (int k = 0; k <= 2 * MOVE_TRIES; k++) {
        /* where planned; then below the module, and above it, in turn */
        uintptr_t at;
        if (k == 0)
            at = want;
        else if (k % 2)
            at = want - (uintptr_t)((k + 1) / 2) * MOVE_STEP;
        else
            at = ((hi + MOVE_STEP - 1) & ~(MOVE_STEP - 1)) + (uintptr_t)(k / 2 - 1) * MOVE_STEP;
        if (at < (1ul << 16) || at > (1ul << 47))
            continue;
        void *r = mmap((void *)at, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (r == MAP_FAILED)
            continue;
        if ((uintptr_t)r != at) { /* (a kernel without MAP_FIXED_NOREPLACE) */
            munmap(r, len);
            continue;
        }
        memcpy(r, p->stubs, h->region_bytes);
        int64_t delta = (int64_t)(at - want);
        int fits = 1;
        for (uint32_t i = 0; i < h->fixups && fits; i++) {
            uint32_t f = p->fixups[i];
            uint8_t *field = (uint8_t *)r + (f & ~LAPSE_PLAN_FIXUP64);
            if (f & LAPSE_PLAN_FIXUP64) {
                int64_t v;
                memcpy(&v, field, 8);
                v -= delta;
                memcpy(field, &v, 8);
            } else {
                int32_t v;
                memcpy(&v, field, 4);
                int64_t moved = (int64_t)v - delta;
                fits = moved == (int32_t)moved;
                v = (int32_t)moved;
                memcpy(field, &v, 4);
            }
        }
        if (fits)
            return at;
        munmap(r, len);
    }
    return 0;
}

/* Applies plan `p` to module `m`. */
NOINSTR static void apply(struct plan *p, const struct module *m, int alone)
{
    const struct lapse_plan_header *h = p->h;
    p->phdr = m->ph;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    size_t len = (h->region_bytes + page - 1) & ~(page - 1);
    uintptr_t r = map_region(p, m, len);
    if (!r) {
        report(p, 0, 0, 0, "no free addresses within reach of the module for its stubs");
        return;
    }
    uintptr_t entry = (uintptr_t)lapse_patch_entry;
    memcpy((uint8_t *)r + h->entry_slot, &entry, sizeof entry);
    /* (the word after it: for the entries of a program's own unwinder) */
    if (h->entry_slot + 16 <= h->region_bytes) {
        uintptr_t unwind = (uintptr_t)lapse_patch_unwind;
        memcpy((uint8_t *)r + h->entry_slot + 8, &unwind, sizeof unwind);
    }
    if (mprotect((void *)r, len, PROT_READ | PROT_EXEC) != 0) {
        munmap((void *)r, len);
        report(p, 0, 0, 0, "mprotect refused the stub region");
        return;
    }
    unsigned patched = 0, changed = 0, racy = 0;
    for (size_t i = 0; i < m->n; i++)
        if (m->ph[i].p_type == PT_LOAD && (m->ph[i].p_flags & PF_X))
            patched += patch_segment(m, &m->ph[i], p, r, alone, &changed, &racy);
    report(p, patched, changed, racy, NULL);
    if (patched && g_npatched < MAX_PATCHED) {
        g_patched[g_npatched] = m->ph;
        __atomic_store_n(&g_npatched, g_npatched + 1, __ATOMIC_RELEASE);
    }
}

/* Maps plan file P.n; 0 when there is none. */
NOINSTR static int load(int n, struct plan *p)
{
    char path[4096 + 32];
    if ((size_t)snprintf(path, sizeof path, "%s.%d", g_prefix, n) >= sizeof path)
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return 0;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(struct lapse_plan_header)) {
        close(fd);
        return 0;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return 0;
    memset(p, 0, sizeof *p);
    p->h = map;
    p->len = (size_t)st.st_size;
    p->n = n;
    const struct lapse_plan_header *h = p->h;
    uint64_t size = sizeof *h + h->region_bytes + (uint64_t)h->sites * sizeof *p->sites +
                    (uint64_t)h->fixups * 4;
    if (h->magic != LAPSE_PLAN_MAGIC || h->region_bytes > p->len || h->sites > p->len ||
        h->fixups > p->len || size != p->len || h->entry_slot + 8 > h->region_bytes) {
        report(p, 0, 0, 0, "unreadable plan");
        munmap(map, p->len);
        return 0;
    }
    p->stubs = (const uint8_t *)(h + 1);
    p->sites = (const void *)(p->stubs + h->region_bytes);
    p->fixups = (const void *)(p->sites + h->sites);
    for (uint32_t i = 0; i < h->fixups; i++) {
        uint64_t at = p->fixups[i] & ~LAPSE_PLAN_FIXUP64;
        if (at + ((p->fixups[i] & LAPSE_PLAN_FIXUP64) ? 8 : 4) > h->region_bytes) {
            report(p, 0, 0, 0, "unreadable plan");
            munmap(map, p->len);
            return 0;
        }
    }
    return 1;
}

/* Applies every plan whose module is loaded now and was not patched yet
 * (a library closed and loaded again is a new image). */
NOINSTR static void apply_loaded(int startup)
{
    static struct modules ms; /* (under g_lock) */
    ms.n = 0;
    dl_iterate_phdr(note_module, &ms);
    int alone = -1;
    for (int i = 0; i < g_nplans; i++) {
        struct plan *p = &g_plans[i];
        for (int k = 0; k < ms.n; k++) {
            const struct module *m = &ms.m[k];
            if (m->ph == p->phdr || !m->ino || m->dev != p->h->dev || m->ino != p->h->ino)
                continue;
            if (alone < 0)
                alone = threads_now() == 1;
            if (startup && !alone) {
                /* (a library constructor that ran first started one) */
                p->phdr = m->ph;
                report(p, 0, 0, 0, "other threads were already running");
            } else {
                apply(p, m, alone);
            }
            break;
        }
    }
}

NOINSTR void lapse_patch_apply(void)
{
    const char *prefix = lapse_env(LAPSE_ENV_PATCH_PLAN);
    if (!prefix || !*prefix || strlen(prefix) >= sizeof g_prefix)
        return;
    pthread_mutex_lock(&g_lock);
    strcpy(g_prefix, prefix);
    g_nplans = 0;
    for (int n = 0; n < LAPSE_PLAN_MAX; n++) {
        if (!load(n, &g_plans[g_nplans]))
            break;
        g_nplans++;
    }
    apply_loaded(1);
    pthread_mutex_unlock(&g_lock);
}

NOINSTR void lapse_patch_loaded(void)
{
    if (!__atomic_load_n(&g_nplans, __ATOMIC_RELAXED))
        return;
    pthread_mutex_lock(&g_lock);
    apply_loaded(0);
    pthread_mutex_unlock(&g_lock);
}

#else

NOINSTR void lapse_patch_apply(void) {}
NOINSTR void lapse_patch_loaded(void) {}

#endif
