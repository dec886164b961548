/* patch.c - run-time patching of an executable built without probes: the
 * runtime's constructor applies the plan the recorder computed (lapse-record,
 * instrument/patch), before the program's own constructors and main run and
 * while only this thread exists.
 *
 * The plan (lapse_rt.h, struct lapse_plan_header) holds finished stubs for
 * a region at a fixed distance from the executable's load bias, and the
 * sites to patch with a jmp rel32 to them. Everything position-dependent was
 * settled by the recorder (a real decoder and encoder relocated the
 * displaced instructions); this file only checks that the plan is for this
 * executable, maps the region, copies the stubs in and writes the jumps.
 * A site whose bytes are not the ones the plan expects is left alone, and
 * if the region cannot be mapped nothing is patched: the program runs as
 * built. What was done goes to a file beside the plan (".done", written by
 * the first process only), which the recorder reports.
 *
 * Not on any probe path: this runs once per process image. */
#define _GNU_SOURCE
#include "rt.h"

#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

const void *lapse_patched_phdr;

#if defined(__x86_64__)

extern void lapse_patch_entry(void);

struct exe {
    uintptr_t bias;
    const ElfW(Phdr) *ph;
    size_t n;
};

/* The first object dl_iterate_phdr reports is the main program. */
NOINSTR static int first_object(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct exe *e = data;
    e->bias = info->dlpi_addr;
    e->ph = info->dlpi_phdr;
    e->n = info->dlpi_phnum;
    return 1;
}

NOINSTR static int prot_of(uint32_t flags)
{
    return (flags & PF_R ? PROT_READ : 0) | (flags & PF_W ? PROT_WRITE : 0) |
           (flags & PF_X ? PROT_EXEC : 0);
}

/* Says what was done, once per recording (the first process to get here). */
NOINSTR static void report(const char *plan, unsigned patched, unsigned changed, const char *why)
{
    char path[4096], text[256];
    if ((size_t)snprintf(path, sizeof path, "%s.done", plan) >= sizeof path)
        return;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return;
    int n = snprintf(text, sizeof text, "patched %u\nchanged %u\nfailed %s\n", patched, changed,
                     why ? why : "-");
    if (n > 0)
        (void)!write(fd, text, (size_t)n);
    close(fd);
}

/* Writes the jumps of the sites in one executable segment; returns how many. */
NOINSTR static unsigned patch_segment(uintptr_t bias, const ElfW(Phdr) *ph,
                                      const struct lapse_plan_header *h,
                                      const struct lapse_plan_site *sites, unsigned *changed)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uint64_t from = ph->p_vaddr, to = ph->p_vaddr + ph->p_memsz;
    unsigned mine = 0, done = 0;
    for (uint32_t i = 0; i < h->sites; i++)
        mine += sites[i].at >= from && sites[i].at + sites[i].len <= to;
    if (!mine)
        return 0;
    uintptr_t lo = (bias + from) & ~(page - 1);
    uintptr_t hi = (bias + to + page - 1) & ~(page - 1);
    if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE | PROT_EXEC) != 0)
        return 0;
    for (uint32_t i = 0; i < h->sites; i++) {
        const struct lapse_plan_site *s = &sites[i];
        if (!(s->at >= from && s->at + s->len <= to))
            continue;
        if (s->len < LAPSE_PLAN_JMP || s->len > LAPSE_PLAN_ORIG) {
            (*changed)++;
            continue;
        }
        uint8_t *at = (uint8_t *)(bias + s->at);
        if (memcmp(at, s->orig, s->len) != 0) {
            (*changed)++; /* not the code the plan was made for */
            continue;
        }
        int32_t rel = (int32_t)(h->region + (int64_t)s->stub - (int64_t)s->at - LAPSE_PLAN_JMP);
        uint8_t jmp[LAPSE_PLAN_JMP] = {0xe9};
        memcpy(jmp + 1, &rel, 4);
        memcpy(at, jmp, LAPSE_PLAN_JMP);
        /* the rest of the displaced bytes: no branch goes there (the plan
         * checked), so int3 makes a wrong one loud instead of silent */
        memset(at + LAPSE_PLAN_JMP, 0xcc, s->len - LAPSE_PLAN_JMP);
        done++;
    }
    mprotect((void *)lo, hi - lo, prot_of(ph->p_flags));
    return done;
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

NOINSTR void lapse_patch_apply(void)
{
    const char *plan = lapse_env(LAPSE_ENV_PATCH_PLAN);
    if (!plan || !*plan)
        return;
    int fd = open(plan, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return;
    struct stat st, self;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(struct lapse_plan_header) ||
        stat("/proc/self/exe", &self) != 0) {
        close(fd);
        return;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return;
    const struct lapse_plan_header *h = map;
    const uint8_t *stubs = (const uint8_t *)(h + 1);
    const struct lapse_plan_site *sites = (const void *)(stubs + h->region_bytes);
    int mine = h->magic == LAPSE_PLAN_MAGIC && h->dev == (uint64_t)self.st_dev &&
               h->ino == (uint64_t)self.st_ino;
    /* (an exec'd program that is not the one the plan is for: nothing to do) */
    if (!mine)
        goto out;
    if (h->region_bytes > (uint64_t)st.st_size ||
        sizeof *h + h->region_bytes + (uint64_t)h->sites * sizeof *sites != (uint64_t)st.st_size ||
        h->entry_slot + 8 > h->region_bytes) {
        report(plan, 0, 0, "unreadable plan");
        goto out;
    }
    /* Writing a jump is not atomic: another thread could run the bytes
     * half-written (a library constructor that ran first and started one). */
    if (threads_now() != 1) {
        report(plan, 0, 0, "other threads were already running");
        goto out;
    }
    struct exe e = {0};
    dl_iterate_phdr(first_object, &e);
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t want = e.bias + (uintptr_t)h->region;
    size_t len = (h->region_bytes + page - 1) & ~(page - 1);
    void *r = mmap((void *)want, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (r == MAP_FAILED || (uintptr_t)r != want) {
        if (r != MAP_FAILED)
            munmap(r, len); /* (a kernel without MAP_FIXED_NOREPLACE put it elsewhere) */
        report(plan, 0, 0, "the stub region's addresses are taken");
        goto out;
    }
    memcpy(r, stubs, h->region_bytes);
    uintptr_t entry = (uintptr_t)lapse_patch_entry;
    memcpy((uint8_t *)r + h->entry_slot, &entry, sizeof entry);
    if (mprotect(r, len, PROT_READ | PROT_EXEC) != 0) {
        munmap(r, len);
        report(plan, 0, 0, "mprotect refused the stub region");
        goto out;
    }
    unsigned patched = 0, changed = 0;
    for (size_t i = 0; i < e.n; i++)
        if (e.ph[i].p_type == PT_LOAD && (e.ph[i].p_flags & PF_X))
            patched += patch_segment(e.bias, &e.ph[i], h, sites, &changed);
    report(plan, patched, changed, NULL);
    if (patched)
        lapse_patched_phdr = e.ph;
out:
    munmap(map, (size_t)st.st_size);
}

#else

NOINSTR void lapse_patch_apply(void) {}

#endif
