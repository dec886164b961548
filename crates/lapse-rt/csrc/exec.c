/* exec.c - the exec family and posix_spawn, wrapped.
 *
 * - Before the process image is replaced, buffered events are handed over
 *   (glibc's exec functions call execve internally without the PLT, so each
 *   public entry point is wrapped, not just execve).
 * - The environment a child gets is fixed up (env.c): an explicit
 *   environment that lacks lapse's variables gets them back, so that the
 *   child is traced like any other (LD_PRELOAD keeps the program's own
 *   entries, after the runtime); with --no-inherit they are taken out.
 *
 * No malloc (exec may run in a vfork child or a signal handler): the new
 * environment is built on this stack frame. */
#define _GNU_SOURCE
#include "rt.h"

#include <dlfcn.h>
#include <errno.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((no_instrument_function, visibility("default")))
#define MAX_ARGS 4096
/* Environments longer than this are passed on as they are. */
#define MAX_ENV 16384

typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*execvpe_fn)(const char *, char *const[], char *const[]);
typedef int (*fexecve_fn)(int, char *const[], char *const[]);
typedef int (*spawn_fn)(pid_t *, const char *, const posix_spawn_file_actions_t *,
                        const posix_spawnattr_t *, char *const[], char *const[]);

/* Entries of envp, or -1 when there are too many to fix up on the stack. */
NOINSTR static long env_len(char *const envp[])
{
    long n = 0;
    while (envp && envp[n])
        if (++n > MAX_ENV)
            return -1;
    return n;
}

/* Room fix_env needs for LD_PRELOAD's new value (0: none). */
NOINSTR static size_t preload_room(char *const envp[])
{
    size_t room = 64 + strlen(lapse_env_self());
    for (long i = 0; envp && envp[i]; i++)
        if (strncmp(envp[i], "LD_PRELOAD=", 11) == 0)
            room += strlen(envp[i]);
    return room;
}

/* The environment a child should get from envp: into out (n + 8 entries)
 * and preload (preload_room bytes); envp itself when nothing changes. */
NOINSTR static char *const *fix_env(char *const envp[], long n, char **out, char *preload)
{
    /* (a fork child under --no-inherit has the runtime off, but still
     * takes lapse's variables out of what its own children get) */
    if (n < 0 || (g_inited != 1 && !g_no_inherit))
        return envp;
    long k = lapse_env_fix(envp, n, out, preload);
    return k < 0 ? envp : out;
}

/* Declares the stack room for fixing envp up and sets `fixed`. */
#define FIXED_ENV(envp, fixed)                                                  \
    long env_n_ = (envp) ? env_len(envp) : 0;                                   \
    char *env_out_[env_n_ >= 0 ? env_n_ + 8 : 1];                               \
    char env_preload_[env_n_ >= 0 ? preload_room(envp) : 1];                    \
    char *const *fixed = fix_env((envp), env_n_, env_out_, env_preload_)

EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
    execve_fn real = (execve_fn)dlsym(RTLD_NEXT, "execve");
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    FIXED_ENV(envp, env);
    lapse_before_exec();
    return real(path, argv, env);
}

EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    execvpe_fn real = (execvpe_fn)dlsym(RTLD_NEXT, "execvpe");
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    FIXED_ENV(envp, env);
    lapse_before_exec();
    return real(file, argv, env);
}

EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
    fexecve_fn real = (fexecve_fn)dlsym(RTLD_NEXT, "fexecve");
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    FIXED_ENV(envp, env);
    lapse_before_exec();
    return real(fd, argv, env);
}

EXPORT int execv(const char *path, char *const argv[])
{
    return execve(path, argv, environ);
}

EXPORT int execvp(const char *file, char *const argv[])
{
    return execvpe(file, argv, environ);
}

/* The list forms: collect the arguments (and for execle the environment). */
#define COLLECT(first, ap, argv, n)                                                    \
    do {                                                                               \
        argv[0] = (char *)(first);                                                     \
        n = 1;                                                                         \
        while (n < MAX_ARGS - 1 && (argv[n] = va_arg(ap, char *)) != NULL)             \
            n++;                                                                       \
        argv[n] = NULL;                                                                \
    } while (0)

EXPORT int execl(const char *path, const char *arg, ...)
{
    char *argv[MAX_ARGS];
    size_t n;
    va_list ap;
    va_start(ap, arg);
    COLLECT(arg, ap, argv, n);
    va_end(ap);
    (void)n;
    return execve(path, argv, environ);
}

EXPORT int execlp(const char *file, const char *arg, ...)
{
    char *argv[MAX_ARGS];
    size_t n;
    va_list ap;
    va_start(ap, arg);
    COLLECT(arg, ap, argv, n);
    va_end(ap);
    (void)n;
    return execvpe(file, argv, environ);
}

EXPORT int execle(const char *path, const char *arg, ...)
{
    char *argv[MAX_ARGS];
    size_t n;
    va_list ap;
    va_start(ap, arg);
    COLLECT(arg, ap, argv, n);
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    (void)n;
    return execve(path, argv, envp);
}

/* posix_spawn does not replace this image: only the environment changes. */
NOINSTR static int spawn(const char *name, pid_t *pid, const char *path,
                         const posix_spawn_file_actions_t *fa, const posix_spawnattr_t *attr,
                         char *const argv[], char *const envp[])
{
    spawn_fn real = (spawn_fn)dlsym(RTLD_NEXT, name);
    if (!real)
        return ENOSYS;
    FIXED_ENV(envp, env);
    return real(pid, path, fa, attr, argv, env);
}

EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
                       const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
    return spawn("posix_spawn", pid, path, fa, attr, argv, envp);
}

EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
                        const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
    return spawn("posix_spawnp", pid, file, fa, attr, argv, envp);
}
