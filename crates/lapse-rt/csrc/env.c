/* env.c - lapse's environment variables in the program's environment.
 *
 * At start-up the runtime takes a copy of its variables (LD_PRELOAD's entry
 * for this library, LAPSE_*). With --no-inherit (LAPSE_NO_INHERIT) it then
 * removes them from the environment, so that no child gets the runtime.
 * Otherwise exec.c puts them back into explicit environments that lack them
 * (execve, execle, execvpe, fexecve, posix_spawn*), so that children stay
 * traced whatever environment the program hands them.
 *
 * No malloc: the copies live in static buffers, and a new environment is
 * built in memory the caller provides (exec.c: on its stack), since exec may
 * be called in a vfork child or a signal handler. */
#define _GNU_SOURCE
#include "rt.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define VAR_MAX 4096 /* longest NAME=value kept (longer: not kept) */

/* (not LAPSE_CALIBRATE: only the first process measures the probe cost) */
static const char *const g_names[] = {
    LAPSE_ENV_SOCKET,     LAPSE_ENV_SPILL,       LAPSE_ENV_FLUSH_TICKS, LAPSE_ENV_NO_ARENA,
    LAPSE_ENV_NO_INHERIT, LAPSE_ENV_SPILL_MAX, LAPSE_ENV_NO_LIBCALLS, LAPSE_ENV_SESSION,
    LAPSE_ENV_PATCH_PLAN, LAPSE_ENV_BUFFERS, LAPSE_ENV_FILTER, LAPSE_ENV_SIGNAL,
    LAPSE_ENV_CONTROL_ONLY};
#define N_NAMES (sizeof g_names / sizeof g_names[0])

static char g_vars[N_NAMES][VAR_MAX]; /* "NAME=value", or "" */
static char g_self[VAR_MAX];          /* this library's path, as in LD_PRELOAD */
static char g_preload_rest[VAR_MAX];  /* LD_PRELOAD without it (--no-inherit) */
int g_no_inherit;
static int g_given; /* attached: g_vars came from lapse_env_give */

NOINSTR static int has_name(const char *entry, const char *name)
{
    size_t n = strlen(name);
    return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

/* Where this library's path is in an LD_PRELOAD value (separators: space
 * or colon), or NULL. */
NOINSTR static const char *find_self(const char *list)
{
    size_t n = strlen(g_self);
    if (!n)
        return NULL;
    for (const char *p = list; (p = strstr(p, g_self)) != NULL; p += n) {
        int starts = p == list || p[-1] == ' ' || p[-1] == ':';
        int ends = p[n] == 0 || p[n] == ' ' || p[n] == ':';
        if (starts && ends)
            return p;
    }
    return NULL;
}

NOINSTR void lapse_env_init(void)
{
    Dl_info info;
    if (dladdr((void *)lapse_env_init, &info) && info.dli_fname &&
        strlen(info.dli_fname) < sizeof g_self)
        strcpy(g_self, info.dli_fname);
    if (g_given)
        return; /* (attached: the process's environment is its own) */
    for (size_t i = 0; i < N_NAMES; i++) {
        const char *v = getenv(g_names[i]);
        g_vars[i][0] = 0;
        if (v && strlen(g_names[i]) + 1 + strlen(v) < VAR_MAX) {
            strcpy(g_vars[i], g_names[i]);
            strcat(g_vars[i], "=");
            strcat(g_vars[i], v);
        }
    }
    g_no_inherit = getenv(LAPSE_ENV_NO_INHERIT) != NULL;
    if (!g_no_inherit)
        return;
    /* --no-inherit: children get neither the runtime nor its variables. */
    for (size_t i = 0; i < N_NAMES; i++)
        unsetenv(g_names[i]);
    for (char **e = environ; e && *e; e++) {
        if (!has_name(*e, "LD_PRELOAD"))
            continue;
        const char *list = *e + strlen("LD_PRELOAD=");
        const char *me = find_self(list);
        if (!me)
            break;
        /* the rest, without this library (and one separator) */
        size_t before = (size_t)(me - list), n = strlen(g_self);
        const char *after = me + n + (me[n] ? 1 : 0);
        if (strlen("LD_PRELOAD=") + strlen(list) >= sizeof g_preload_rest)
            break;
        strcpy(g_preload_rest, "LD_PRELOAD=");
        strncat(g_preload_rest, list, before);
        strcat(g_preload_rest, after);
        size_t len = strlen(g_preload_rest);
        while (len > strlen("LD_PRELOAD=") &&
               (g_preload_rest[len - 1] == ' ' || g_preload_rest[len - 1] == ':'))
            g_preload_rest[--len] = 0;
        if (len == strlen("LD_PRELOAD="))
            unsetenv("LD_PRELOAD");
        else
            *e = g_preload_rest; /* (the original string may be read-only) */
        break;
    }
}

/* The value lapse_env_init saw for `name` (one of LAPSE_ENV_*), or NULL. */
NOINSTR const char *lapse_env(const char *name)
{
    for (size_t i = 0; i < N_NAMES; i++)
        if (strcmp(g_names[i], name) == 0 && g_vars[i][0])
            return g_vars[i] + strlen(name) + 1;
    return NULL;
}

/* This library's path as LD_PRELOAD names it ("" if unknown). */
NOINSTR const char *lapse_env_self(void)
{
    return g_self;
}

/* Writes the environment a child should get from envp (n entries) into out
 * (room for n + 8 entries): with lapse's variables added where missing (and
 * this library first in LD_PRELOAD), or taken out with --no-inherit. A new
 * LD_PRELOAD entry is built in `preload` (exec.c sizes it). Returns the
 * number of entries. */
NOINSTR long lapse_env_fix(char *const envp[], long n, char **out, char *preload)
{
    /* A process that cannot read this library now (it dropped privileges
     * since it started: setuid to another user) would make the dynamic
     * linker print an error on its new image's stderr: that image gets no
     * runtime, as with --no-inherit, and the recorder notes the process
     * that never said hello. */
    int strip = g_no_inherit || (g_self[0] && faccessat(AT_FDCWD, g_self, R_OK, AT_EACCESS) != 0);
    int have[N_NAMES] = {0};
    int preload_seen = 0;
    long k = 0;
    for (long j = 0; j < n; j++) {
        char *e = envp[j];
        int ours = 0;
        for (size_t i = 0; i < N_NAMES; i++) {
            if (has_name(e, g_names[i])) {
                have[i] = 1;
                ours = 1;
            }
        }
        if (strip && (ours || has_name(e, LAPSE_ENV_CALIBRATE)))
            continue; /* (only lapse's own: a user's LAPSE_X stays) */
        if (!has_name(e, "LD_PRELOAD") || preload_seen) {
            out[k++] = e;
            continue;
        }
        preload_seen = 1;
        const char *list = e + strlen("LD_PRELOAD=");
        const char *me = find_self(list);
        if (!strip && !me && g_self[0]) {
            /* the runtime first, then the program's own preloads */
            strcpy(preload, "LD_PRELOAD=");
            strcat(preload, g_self);
            if (*list) {
                strcat(preload, " ");
                strcat(preload, list);
            }
            out[k++] = preload;
        } else if (strip && me) {
            size_t before = (size_t)(me - list), len = strlen(g_self);
            const char *after = me + len + (me[len] ? 1 : 0);
            strcpy(preload, "LD_PRELOAD=");
            strncat(preload, list, before);
            strcat(preload, after);
            if (preload[strlen("LD_PRELOAD=")])
                out[k++] = preload;
        } else {
            out[k++] = e;
        }
    }
    if (!strip) {
        if (!preload_seen && g_self[0]) {
            strcpy(preload, "LD_PRELOAD=");
            strcat(preload, g_self);
            out[k++] = preload;
        }
        for (size_t i = 0; i < N_NAMES; i++)
            if (!have[i] && g_vars[i][0])
                out[k++] = g_vars[i];
    }
    out[k] = NULL;
    return k;
}

/* Attach (attach.c): no environment to read, the recorder hands the
 * variables over as "NAME=value" lines; only lapse's own are kept. */
NOINSTR void lapse_env_give(const char *vars)
{
    for (size_t i = 0; i < N_NAMES; i++)
        g_vars[i][0] = 0;
    for (const char *line = vars; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        for (size_t i = 0; i < N_NAMES; i++) {
            size_t n = strlen(g_names[i]);
            if (len < VAR_MAX && len > n && strncmp(line, g_names[i], n) == 0 && line[n] == '=') {
                memcpy(g_vars[i], line, len);
                g_vars[i][len] = 0;
            }
        }
        line = end ? end + 1 : line + len;
    }
    g_no_inherit = lapse_env(LAPSE_ENV_NO_INHERIT) != NULL;
    g_given = 1;
}
