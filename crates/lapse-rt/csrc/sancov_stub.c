/* sancov_stub.c - linked into every program `lapse build` builds (and into
 * C/C++ programs built with clang's -fsanitize-coverage=func,trace-pc-guard,
 * see `lapse build --stub-object`): the two functions sanitizer coverage
 * calls, so that the program links and runs without lapse.
 *
 * __sanitizer_cov_trace_pc_guard is one indirect jump. Its target is an
 * empty function unless the lapse runtime is loaded: then the module's
 * constructor (__sanitizer_cov_trace_pc_guard_init) finds the runtime's
 * lapse_sancov_register, hands it the module's guards and jumps to what it
 * answers from then on. Both are strong definitions: clang links its own
 * sanitizer runtime's weak, coverage-dumping ones when it sees
 * -fsanitize-coverage, and this object must win over them.
 *
 * This file is compiled by lapse-rt's build.rs into an object the lapse
 * binary carries; it must not need anything but the C library. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>

__attribute__((visibility("hidden"))) void lapse_sancov_off(void);
__attribute__((visibility("hidden"))) void *lapse_sancov_target = (void *)lapse_sancov_off;

__asm__(".text\n"
        ".p2align 4\n"
        ".hidden lapse_sancov_off\n"
        ".type lapse_sancov_off, @function\n"
        "lapse_sancov_off:\n"
        "    ret\n"
        ".size lapse_sancov_off, .-lapse_sancov_off\n"
        ".globl __sanitizer_cov_trace_pc_guard\n"
        ".type __sanitizer_cov_trace_pc_guard, @function\n"
        ".p2align 4\n"
        "__sanitizer_cov_trace_pc_guard:\n"
        "    .cfi_startproc\n"
        "    jmp *lapse_sancov_target(%rip)\n"
        "    .cfi_endproc\n"
        ".size __sanitizer_cov_trace_pc_guard, .-__sanitizer_cov_trace_pc_guard\n");

typedef void *(*register_fn)(uint32_t *, uint32_t *);

__attribute__((no_instrument_function)) void
__sanitizer_cov_trace_pc_guard_init(uint32_t *start, uint32_t *stop)
{
    if (start == stop)
        return;
    register_fn reg = (register_fn)dlsym(RTLD_DEFAULT, "lapse_sancov_register");
    if (!reg)
        return;
    void *target = reg(start, stop);
    if (target)
        __atomic_store_n(&lapse_sancov_target, target, __ATOMIC_RELEASE);
}
