/* libcalls.c - calls into other libraries, as functions of their library.
 *
 * Every call an instrumented module makes into another shared object goes
 * through its GOT: a JUMP_SLOT (through the PLT) or, built with -fno-plt, a
 * GLOB_DAT slot it calls directly. At start-up and after dlopen, the
 * runtime points each such slot at a stub of its own (x86_64.S), which
 * records the entry, hooks the return trampoline (trampoline.c) and jumps
 * on to the function: the call becomes a function of the library it
 * resolves to (fsync in libc.so.6), with its own values and the OS events
 * inside it. Calls between libraries are not traced: only instrumented
 * modules' slots are redirected.
 *
 * Left alone:
 * - calls into the dynamic linker, into modules that are instrumented
 *   themselves (their own probes report them), and into the lapse runtime
 *   (its wrappers; the exec family is shown as the C library's);
 * - calls that return twice or elsewhere (setjmp, vfork, getcontext, ...)
 *   or never (exit, abort, ...): the program's own frames report those
 *   (swapcontext, which returns when its context is resumed, is traced
 *   through the runtime's wrapper, context.c);
 * - dlopen and dlsym find their caller by their return address: their stub
 *   hooks nothing, it notes (dlopen) that new modules are to be looked for
 *   once the call has returned, which the next hook above it does;
 * - a GLOB_DAT slot the code also uses other than to call through (its
 *   value is compared or passed on: it must stay the function's address).
 *
 * Binding: a lazily bound slot points into the module's own PLT until its
 * first call. The runtime resolves it then and there as the dynamic linker
 * would (the symbol version the module was linked against, the global
 * scope first, then the module's own), so the PLT's lazy path is never
 * taken for it: a first call that never returns, or other threads calling
 * meanwhile, cannot take a slot back from the stub. A symbol that does not
 * resolve now is left to the dynamic linker. Slots of a RELRO segment
 * (BIND_NOW) are written with its pages made writable for the moment.
 *
 * Runs only from the constructor and from hooks' slow variants outside
 * signal handlers (trampoline.c), under one lock; never from the probe path. */
#define _GNU_SOURCE
#include "rt.h"
#include "stubs.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__)

_Static_assert(sizeof(struct lapse_import) == (1u << IMPORT_SHIFT), "stubs.h: IMPORT_SHIFT");
_Static_assert(offsetof(struct lapse_import, target) == IMPORT_TARGET &&
                   offsetof(struct lapse_import, fn) == IMPORT_FN,
               "stubs.h: IMPORT_TARGET, IMPORT_FN");

__attribute__((visibility("hidden"))) struct lapse_import lapse_imports[LIBCALL_STUBS];
extern char lapse_libcall_stubs[]; /* x86_64.S */
static uint32_t g_nimports;

#define MAX_MODULES 1024
#define MAX_CANDIDATES 4096 /* GLOB_DAT slots checked per module */
#define MAX_SCAN_BYTES ((uintptr_t)64 << 20) /* larger code: -fno-plt slots left alone */

struct module {
    uintptr_t base;               /* load bias (l_addr) */
    const char *name;             /* as the dynamic linker knows it ("": the program) */
    const ElfW(Dyn) *dyn;         /* identity, with base */
    const ElfW(Phdr) *phdr;
    uint32_t phnum;
    uintptr_t lo, hi;             /* what its PT_LOADs cover */
    int instrumented;
    int vdso;
    int seen;                     /* in the latest walk of the loaded modules */
    uint32_t first, count;        /* its redirected imports */
};

static struct module g_mods[MAX_MODULES];
static int g_nmods;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t g_self_base;

/* What the runtime never redirects (see the top of this file). */
static const char *const g_leave[] = {
    "setjmp", "_setjmp", "__sigsetjmp", "sigsetjmp", "savectx", "vfork", "__vfork",
    "getcontext", "setcontext", "makecontext", "clone", "__clone", "clone3",
    "exit", "_exit", "_Exit", "quick_exit", "abort", "__stack_chk_fail", "__assert_fail",
    "__assert_perror_fail", "__fortify_fail", "__chk_fail", "err", "errx", "verr", "verrx",
    "__cxa_throw", "__cxa_rethrow", "__cxa_call_unexpected", "_ZSt9terminatev",
    "__libc_start_main", "__tls_get_addr", "__cxa_finalize", "__gmon_start__",
    "dladdr", "dladdr1", "dlinfo",
};
static const char *const g_probes[] = {"__cyg_profile_func_enter", "__cyg_profile_func_exit",
                                       "mcount", "_mcount", "__fentry__"};
/* The lapse runtime's wrappers that stand for a C library function. */
static const char *const g_as_libc[] = {"execve", "execv", "execvp", "execvpe", "execl",
                                        "execlp", "execle", "fexecve", "posix_spawn",
                                        "posix_spawnp", "syscall", "_Fork", "swapcontext",
                                        "sigaction", "signal"};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

NOINSTR static int one_of(const char *name, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(name, list[i]) == 0)
            return 1;
    return 0;
}

/* ---- a module's dynamic section ---- */

struct dyninfo {
    const ElfW(Sym) *symtab;
    const char *strtab;
    const ElfW(Half) *versym;
    const ElfW(Verneed) *verneed;
    size_t verneednum;
    const ElfW(Verdef) *verdef;
    size_t verdefnum;
    const ElfW(Rela) *jmprel;
    size_t pltrelsz;
    const ElfW(Rela) *rela;
    size_t relasz;
    const uint32_t *gnu_hash;
};

/* The dynamic linker relocates most pointers of .dynamic in place; a read-
 * only one (the vDSO's) keeps them relative to the load bias. */
NOINSTR static uintptr_t dptr(uintptr_t base, uintptr_t v)
{
    return v < base ? v + base : v;
}

NOINSTR static struct dyninfo dyn_info(const struct module *m)
{
    struct dyninfo d;
    memset(&d, 0, sizeof d);
    for (const ElfW(Dyn) *e = m->dyn; e->d_tag != DT_NULL; e++) {
        uintptr_t v = e->d_un.d_ptr;
        switch (e->d_tag) {
        case DT_SYMTAB: d.symtab = (const void *)dptr(m->base, v); break;
        case DT_STRTAB: d.strtab = (const void *)dptr(m->base, v); break;
        case DT_JMPREL: d.jmprel = (const void *)dptr(m->base, v); break;
        case DT_PLTRELSZ: d.pltrelsz = e->d_un.d_val; break;
        case DT_RELA: d.rela = (const void *)dptr(m->base, v); break;
        case DT_RELASZ: d.relasz = e->d_un.d_val; break;
        case DT_GNU_HASH: d.gnu_hash = (const void *)dptr(m->base, v); break;
        case DT_VERSYM: d.versym = (const void *)dptr(m->base, v); break;
        case DT_VERNEED: d.verneed = (const void *)dptr(m->base, v); break;
        case DT_VERNEEDNUM: d.verneednum = e->d_un.d_val; break;
        case DT_VERDEF: d.verdef = (const void *)dptr(m->base, v); break;
        case DT_VERDEFNUM: d.verdefnum = e->d_un.d_val; break;
        default: break;
        }
    }
    if (!d.symtab || !d.strtab)
        d.jmprel = d.rela = NULL;
    return d;
}

/* Calls `f(m, d, rela, sym, name, arg)` for every JUMP_SLOT and GLOB_DAT
 * relocation of m that names a symbol. */
typedef int (*reloc_fn)(struct module *, const struct dyninfo *, const ElfW(Rela) *,
                        const ElfW(Sym) *, const char *, void *);

NOINSTR static int each_import(struct module *m, const struct dyninfo *d, reloc_fn f, void *arg)
{
    const ElfW(Rela) *tables[2] = {d->jmprel, d->rela};
    size_t sizes[2] = {d->pltrelsz, d->relasz};
    for (int k = 0; k < 2; k++) {
        if (!tables[k])
            continue;
        for (size_t i = 0; i < sizes[k] / sizeof(ElfW(Rela)); i++) {
            const ElfW(Rela) *r = &tables[k][i];
            uint32_t type = ELF64_R_TYPE(r->r_info), sym = ELF64_R_SYM(r->r_info);
            if ((type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) || sym == 0)
                continue;
            const ElfW(Sym) *s = &d->symtab[sym];
            int stop = f(m, d, r, s, d->strtab + s->st_name, arg);
            if (stop)
                return stop;
        }
    }
    return 0;
}

NOINSTR static int is_probe_import(struct module *m, const struct dyninfo *d, const ElfW(Rela) *r,
                                   const ElfW(Sym) *s, const char *name, void *arg)
{
    (void)m, (void)d, (void)r, (void)arg;
    return s->st_shndx == SHN_UNDEF && one_of(name, g_probes, COUNT(g_probes));
}

/* The exported definitions of `name` (GNU hash table), one per call: the
 * one after `after` (NULL: the first), or NULL when there is none left. A
 * name may have several, one per symbol version. */
NOINSTR static const ElfW(Sym) *next_definition(const struct dyninfo *d, const char *name,
                                                const ElfW(Sym) *after)
{
    if (!d->gnu_hash || !d->symtab)
        return NULL;
    const uint32_t *ht = d->gnu_hash;
    uint32_t nbuckets = ht[0], symoffset = ht[1], bloom_size = ht[2];
    if (!nbuckets)
        return NULL;
    const uint32_t *buckets = (const uint32_t *)((const ElfW(Addr) *)&ht[4] + bloom_size);
    const uint32_t *chain = buckets + nbuckets;
    uint32_t h = 5381;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = h * 33 + *p;
    uint32_t i = buckets[h % nbuckets];
    if (i < symoffset)
        return NULL;
    if (after) {
        uint32_t at = (uint32_t)(after - d->symtab);
        if (at < i || (chain[at - symoffset] & 1))
            return NULL; /* (after was the chain's last) */
        i = at + 1;
    }
    for (;; i++) {
        uint32_t h2 = chain[i - symoffset];
        const ElfW(Sym) *s = &d->symtab[i];
        int visible = ELF64_ST_VISIBILITY(s->st_other) == STV_DEFAULT ||
                      ELF64_ST_VISIBILITY(s->st_other) == STV_PROTECTED;
        if ((h | 1) == (h2 | 1) && s->st_shndx != SHN_UNDEF && visible &&
            strcmp(d->strtab + s->st_name, name) == 0)
            return s;
        if (h2 & 1)
            return NULL;
    }
}

NOINSTR static const ElfW(Sym) *find_symbol_in(const struct dyninfo *d, const char *name)
{
    return next_definition(d, name, NULL);
}

NOINSTR static const ElfW(Sym) *find_symbol(const struct module *m, const char *name)
{
    struct dyninfo d = dyn_info(m);
    return find_symbol_in(&d, name);
}

/* The version m's import of symbol `sym` asks for (NULL: none). */
NOINSTR static const char *import_version(const struct dyninfo *d, uint32_t sym)
{
    if (!d->versym || !d->verneed)
        return NULL;
    ElfW(Half) want = d->versym[sym] & 0x7fff;
    if (want < 2)
        return NULL;
    const ElfW(Verneed) *vn = d->verneed;
    for (size_t i = 0; i < d->verneednum; i++) {
        const ElfW(Vernaux) *va = (const ElfW(Vernaux) *)((const char *)vn + vn->vn_aux);
        for (unsigned k = 0; k < vn->vn_cnt; k++) {
            if (va->vna_other == want)
                return d->strtab + va->vna_name;
            va = (const ElfW(Vernaux) *)((const char *)va + va->vna_next);
        }
        if (!vn->vn_next)
            break;
        vn = (const ElfW(Verneed) *)((const char *)vn + vn->vn_next);
    }
    return NULL;
}

/* The name of version index `ndx` a module defines, or NULL. */
NOINSTR static const char *defined_version(const struct dyninfo *d, ElfW(Half) ndx)
{
    const ElfW(Verdef) *vd = d->verdef;
    for (size_t i = 0; vd && i < d->verdefnum; i++) {
        if (vd->vd_ndx == ndx) {
            const ElfW(Verdaux) *va = (const ElfW(Verdaux) *)((const char *)vd + vd->vd_aux);
            return d->strtab + va->vda_name;
        }
        if (!vd->vd_next)
            break;
        vd = (const ElfW(Verdef) *)((const char *)vd + vd->vd_next);
    }
    return NULL;
}

/* Modules in the order the dynamic linker searches them (the order it
 * loaded them: the program, preloaded libraries, their dependencies). */
static int g_order[MAX_MODULES];
static int g_norder;

/* Where the dynamic linker binds an import of `name` (symbol `sym` of d,
 * wanting the version it was linked against, or the default one): the
 * first module in its search order that defines the name acceptably - an
 * unversioned definition (a preloaded library's wrapper, an allocator) or
 * the version asked for; 0 when none does now. (dlvsym alone would skip the
 * unversioned definitions the linker takes.) */
NOINSTR static uintptr_t resolve_import(const struct dyninfo *d, uint32_t sym, const char *name)
{
    const char *version = import_version(d, sym);
    for (int k = 0; k < g_norder; k++) {
        const struct module *x = &g_mods[g_order[k]];
        struct dyninfo xd = dyn_info(x);
        for (const ElfW(Sym) *s = next_definition(&xd, name, NULL); s;
             s = next_definition(&xd, name, s)) {
            ElfW(Half) ver = xd.versym ? xd.versym[s - xd.symtab] : 1;
            ElfW(Half) ndx = ver & 0x7fff;
            const char *def = ndx >= 2 ? defined_version(&xd, ndx) : NULL;
            int ok;
            if (ndx == 0)
                ok = 0; /* (local) */
            else if (ndx == 1)
                ok = 1; /* unversioned: taken for any version */
            else if (version)
                ok = def && strcmp(def, version) == 0;
            else
                ok = !(ver & 0x8000); /* the default version */
            if (!ok)
                continue;
            if (ELF64_ST_TYPE(s->st_info) != STT_GNU_IFUNC)
                return x->base + s->st_value;
            /* (an IFUNC's resolver picks the implementation: the linker's call) */
            void *at = def ? dlvsym(RTLD_DEFAULT, name, def) : dlsym(RTLD_DEFAULT, name);
            return (uintptr_t)at;
        }
    }
    return 0;
}

NOINSTR static struct module *module_at(uintptr_t a)
{
    for (int i = 0; i < g_nmods; i++)
        if (g_mods[i].seen && a >= g_mods[i].lo && a < g_mods[i].hi)
            return &g_mods[i];
    return NULL;
}

/* ---- -fno-plt: which GLOB_DAT slots the code only calls through ---- */

struct candidates {
    uintptr_t slot[MAX_CANDIDATES]; /* sorted */
    uint32_t calls[MAX_CANDIDATES];
    uint32_t other[MAX_CANDIDATES];
    uint32_t n;
};
static struct candidates g_cand; /* (under g_lock) */

NOINSTR static int cand_index(uintptr_t a)
{
    uint32_t lo = 0, hi = g_cand.n;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (g_cand.slot[mid] < a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < g_cand.n && g_cand.slot[lo] == a ? (int)lo : -1;
}

/* Every rip-relative reference to a candidate slot in m's code: a call or
 * jump through it (ff 15 / ff 25 disp32) or anything else (a load, a
 * compare). An instruction's displacement is followed by 0, 1, 2 or 4
 * bytes of immediate, so each end is tried; a false match only makes the
 * runtime leave a slot alone. */
NOINSTR static void scan_references(const struct module *m)
{
    if (!g_cand.n)
        return;
    uintptr_t first = g_cand.slot[0], last = g_cand.slot[g_cand.n - 1];
    for (uint32_t k = 0; k < m->phnum; k++) {
        const ElfW(Phdr) *ph = &m->phdr[k];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X) || !(ph->p_flags & PF_R))
            continue;
        const unsigned char *lo = (const unsigned char *)(m->base + ph->p_vaddr);
        const unsigned char *hi = lo + ph->p_filesz;
        if (ph->p_filesz > MAX_SCAN_BYTES) {
            for (uint32_t i = 0; i < g_cand.n; i++)
                g_cand.other[i]++;
            return;
        }
        static const int ends[4] = {4, 5, 6, 8};
        for (const unsigned char *p = lo + 2; p + 8 <= hi; p++) {
            int32_t disp;
            memcpy(&disp, p, sizeof disp);
            for (int e = 0; e < 4; e++) {
                uintptr_t target = (uintptr_t)p + (uintptr_t)ends[e] + (intptr_t)disp;
                if (target < first || target > last)
                    continue;
                int i = cand_index(target);
                if (i < 0)
                    continue;
                if (ends[e] == 4 && p[-2] == 0xff && (p[-1] == 0x15 || p[-1] == 0x25))
                    g_cand.calls[i]++;
                else
                    g_cand.other[i]++;
            }
        }
    }
}

/* ---- redirecting ---- */

/* RELRO pages of m made writable for the writes that follow (0), or -1. */
struct relro {
    uintptr_t lo, hi; /* whole pages the dynamic linker protected */
    int open;
};

NOINSTR static struct relro relro_of(const struct module *m)
{
    struct relro r = {0, 0, 0};
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (uint32_t k = 0; k < m->phnum; k++) {
        const ElfW(Phdr) *ph = &m->phdr[k];
        if (ph->p_type == PT_GNU_RELRO) {
            r.lo = (m->base + ph->p_vaddr) & ~(page - 1);
            r.hi = (m->base + ph->p_vaddr + ph->p_memsz) & ~(page - 1);
        }
    }
    return r;
}

/* Writes v into slot, opening RELRO pages when the slot is in them; 0 on success. */
NOINSTR static int write_slot(struct relro *r, uintptr_t *slot, uintptr_t v)
{
    uintptr_t a = (uintptr_t)slot;
    if (a >= r->lo && a < r->hi && !r->open) {
        if (mprotect((void *)r->lo, r->hi - r->lo, PROT_READ | PROT_WRITE) != 0)
            return -1;
        r->open = 1;
    }
    __atomic_store_n(slot, v, __ATOMIC_RELEASE);
    return 0;
}

NOINSTR static void close_relro(struct relro *r)
{
    if (r->open)
        mprotect((void *)r->lo, r->hi - r->lo, PROT_READ);
    r->open = 0;
}

struct hook_ctx {
    struct relro relro;
    const ElfW(Rela) *jmprel;
    size_t njmprel;
};

/* A JUMP_SLOT of the same symbol: the GLOB_DAT slot only takes its address. */
NOINSTR static int has_jump_slot(const struct hook_ctx *c, uint32_t sym)
{
    for (size_t i = 0; i < c->njmprel; i++)
        if (ELF64_R_SYM(c->jmprel[i].r_info) == sym &&
            ELF64_R_TYPE(c->jmprel[i].r_info) == R_X86_64_JUMP_SLOT)
            return 1;
    return 0;
}

NOINSTR static int glob_dat_candidate(struct module *m, const struct dyninfo *d,
                                      const ElfW(Rela) *r, const ElfW(Sym) *s, const char *name,
                                      void *arg)
{
    (void)d;
    struct hook_ctx *c = arg;
    uint32_t type = ELF64_ST_TYPE(s->st_info);
    if (ELF64_R_TYPE(r->r_info) != R_X86_64_GLOB_DAT || (type != STT_FUNC && type != STT_GNU_IFUNC) ||
        has_jump_slot(c, ELF64_R_SYM(r->r_info)) || one_of(name, g_leave, COUNT(g_leave)) ||
        g_cand.n >= MAX_CANDIDATES)
        return 0;
    uintptr_t slot = m->base + r->r_offset;
    uint32_t at = g_cand.n;
    while (at > 0 && g_cand.slot[at - 1] > slot) {
        g_cand.slot[at] = g_cand.slot[at - 1];
        at--;
    }
    g_cand.slot[at] = slot;
    g_cand.n++;
    return 0;
}

/* The function events name for a call to `name` that lands at `target` in
 * module t: an IFUNC's own symbol (strlen, not __strlen_avx2). */
NOINSTR static uintptr_t event_fn(const struct module *t, const char *name, uintptr_t target)
{
    const ElfW(Sym) *s = find_symbol(t, name);
    if (s && ELF64_ST_TYPE(s->st_info) == STT_GNU_IFUNC)
        return t->base + s->st_value;
    return target;
}

NOINSTR static int redirect(struct module *m, const struct dyninfo *d, const ElfW(Rela) *r,
                            const ElfW(Sym) *s, const char *name, void *arg)
{
    struct hook_ctx *c = arg;
    uint32_t rtype = ELF64_R_TYPE(r->r_info);
    uintptr_t *slot = (uintptr_t *)(m->base + r->r_offset);
    if (one_of(name, g_leave, COUNT(g_leave)) || one_of(name, g_probes, COUNT(g_probes)))
        return 0;
    if (rtype == R_X86_64_GLOB_DAT) {
        int i = cand_index((uintptr_t)slot);
        if (i < 0 || !g_cand.calls[i] || g_cand.other[i])
            return 0;
    }
    uintptr_t v = *slot;
    int unrelocated = m->base && v < m->hi - m->lo; /* (still a link-time value) */
    if (!v || unrelocated ||
        (v >= (uintptr_t)lapse_libcall_stubs &&
         v < (uintptr_t)lapse_libcall_stubs + LIBCALL_STUBS * LIBCALL_STUB_BYTES))
        return 0; /* (unresolved weak, not relocated yet, or ours already) */
    uint32_t flags = IMP_TRACE;
    uintptr_t target = v;
    if (s->st_shndx == SHN_UNDEF && v >= m->lo && v < m->hi) {
        /* bound lazily (the slot is the PLT's way to the dynamic linker):
         * resolved here as the linker would */
        target = resolve_import(d, (uint32_t)ELF64_R_SYM(r->r_info), name);
        if (!target)
            return 0;
    }
    struct module *t = module_at(target);
    if (!t || t == m || t->instrumented || t->base == (uintptr_t)_r_debug.r_ldbase)
        return 0;
    uintptr_t fn = event_fn(t, name, target);
    if (t->base == g_self_base) {
        if (!one_of(name, g_as_libc, COUNT(g_as_libc)))
            return 0;
        fn = (uintptr_t)dlsym(RTLD_NEXT, name); /* the C library's, for its name */
        if (!fn)
            return 0;
    }
    if (strcmp(name, "dlopen") == 0 || strcmp(name, "dlmopen") == 0)
        flags = IMP_RESCAN;
    else if (strcmp(name, "dlsym") == 0 || strcmp(name, "dlvsym") == 0)
        flags = 0; /* (it finds its caller by its return address: no trampoline) */

    if (g_nimports >= LIBCALL_STUBS)
        return 1; /* no stub left: the rest of the program's imports stay as they are */
    uint32_t i = g_nimports;
    struct lapse_import *imp = &lapse_imports[i];
    imp->target = target;
    imp->fn = fn;
    imp->got = slot;
    imp->stub = (uintptr_t)lapse_libcall_stubs + (uintptr_t)i * LIBCALL_STUB_BYTES;
    imp->flags = flags;
    imp->module = (uint32_t)(m - g_mods);
    if (write_slot(&c->relro, slot, imp->stub) != 0)
        return 0;
    g_nimports = i + 1;
    if (!m->count)
        m->first = i;
    m->count++;
    return 0;
}

NOINSTR static void hook_module(struct module *m)
{
    struct dyninfo d = dyn_info(m);
    struct hook_ctx c;
    memset(&c, 0, sizeof c);
    c.relro = relro_of(m);
    c.jmprel = d.jmprel;
    c.njmprel = d.jmprel ? d.pltrelsz / sizeof(ElfW(Rela)) : 0;
    memset(&g_cand, 0, sizeof g_cand);
    each_import(m, &d, glob_dat_candidate, &c);
    scan_references(m);
    m->count = 0;
    each_import(m, &d, redirect, &c);
    close_relro(&c.relro);
}

/* Still redirected: its first redirected slot holds its stub (a module
 * loaded again at the same place starts with its GOT as the linker made it). */
NOINSTR static int still_hooked(const struct module *m)
{
    if (!m->count)
        return 1;
    const struct lapse_import *imp = &lapse_imports[m->first];
    return __atomic_load_n(imp->got, __ATOMIC_ACQUIRE) == imp->stub;
}

/* ---- walking the loaded modules ---- */

struct walk {
    int fresh[MAX_MODULES];
    int nfresh;
};

NOINSTR static int note_module(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct walk *w = arg;
    const ElfW(Dyn) *dyn = NULL;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int k = 0; k < info->dlpi_phnum; k++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[k];
        if (ph->p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(info->dlpi_addr + ph->p_vaddr);
        if (ph->p_type == PT_LOAD) {
            uintptr_t a = info->dlpi_addr + ph->p_vaddr;
            lo = a < lo ? a : lo;
            hi = a + ph->p_memsz > hi ? a + ph->p_memsz : hi;
        }
    }
    if (!dyn || lo >= hi)
        return 0;
    struct module *m = NULL;
    for (int i = 0; i < g_nmods; i++)
        if (g_mods[i].base == info->dlpi_addr && g_mods[i].dyn == dyn)
            m = &g_mods[i];
    if (m && still_hooked(m)) {
        m->seen = 1;
        if (g_norder < MAX_MODULES && !m->vdso)
            g_order[g_norder++] = (int)(m - g_mods);
        return 0;
    }
    if (!m) {
        if (g_nmods >= MAX_MODULES)
            return 0;
        m = &g_mods[g_nmods++];
    }
    memset(m, 0, sizeof *m);
    m->base = info->dlpi_addr;
    m->name = info->dlpi_name;
    m->dyn = dyn;
    m->phdr = info->dlpi_phdr;
    m->phnum = info->dlpi_phnum;
    m->lo = lo;
    m->hi = hi;
    m->seen = 1;
    struct dyninfo d = dyn_info(m);
    m->instrumented = each_import(m, &d, is_probe_import, NULL) ||
                      lapse_is_patched(info->dlpi_phdr);
    /* (the vDSO is loaded, but not where the linker looks for symbols) */
    m->vdso = strncmp(m->name, "linux-vdso", 10) == 0 || strncmp(m->name, "linux-gate", 10) == 0;
    if (g_norder < MAX_MODULES && !m->vdso)
        g_order[g_norder++] = (int)(m - g_mods);
    if (w->nfresh < MAX_MODULES)
        w->fresh[w->nfresh++] = (int)(m - g_mods);
    return 0;
}

NOINSTR void lapse_libcalls_scan(void)
{
    if (g_inited != 1 || lapse_env(LAPSE_ENV_NO_LIBCALLS))
        return;
    pthread_mutex_lock(&g_lock);
    if (!g_self_base) {
        Dl_info info;
        struct link_map *self = NULL;
        if (dladdr1((void *)lapse_libcalls_scan, &info, (void **)&self, RTLD_DL_LINKMAP) && self)
            g_self_base = self->l_addr;
    }
    static struct walk w; /* (under g_lock) */
    w.nfresh = 0;
    for (int i = 0; i < g_nmods; i++)
        g_mods[i].seen = 0;
    g_norder = 0;
    dl_iterate_phdr(note_module, &w);
    /* (every module's kind is known before any is hooked: calls into an
     * instrumented module are left to its own probes) */
    for (int k = 0; k < w.nfresh; k++) {
        struct module *m = &g_mods[w.fresh[k]];
        if (m->instrumented && m->base != g_self_base)
            hook_module(m);
    }
    pthread_mutex_unlock(&g_lock);
}

#else

NOINSTR void lapse_libcalls_scan(void) {}

#endif
