/* exec.c - the exec family, wrapped so that buffered events are handed over
 * before the process image (and with it every buffer) is replaced. glibc's
 * exec functions call execve internally without the PLT, so each public entry
 * point is wrapped, not just execve. */
#define _GNU_SOURCE
#include "rt.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

#define EXPORT __attribute__((no_instrument_function, visibility("default")))
#define MAX_ARGS 4096

typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*execvpe_fn)(const char *, char *const[], char *const[]);
typedef int (*fexecve_fn)(int, char *const[], char *const[]);

EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
    execve_fn real = (execve_fn)dlsym(RTLD_NEXT, "execve");
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    lapse_before_exec();
    return real(path, argv, envp);
}

EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    execvpe_fn real = (execvpe_fn)dlsym(RTLD_NEXT, "execvpe");
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    lapse_before_exec();
    return real(file, argv, envp);
}

EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
    fexecve_fn real = (fexecve_fn)dlsym(RTLD_NEXT, "fexecve");
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    lapse_before_exec();
    return real(fd, argv, envp);
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
