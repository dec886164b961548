/* x86_64.S - the entry points that compilers and the dynamic linker call
 * into, and the return trampoline (trampoline.c holds what they run).
 *
 * - __fentry__ (-pg -mfentry): called as its function's first instruction,
 *   so the function's return address is the word above the stub's own.
 * - mcount / _mcount (-pg): called after the function's prologue, which
 *   always sets up %rbp (gcc and clang keep the frame pointer for -pg), so
 *   the return address is at 8(%rbp).
 * - lapse_tramp_return: where a hooked function returns to.
 *
 * Every general register the program may still need is saved: argument
 * registers (the function has not read them yet), %rax (the vector count
 * of variadic calls, or a return value), %r10 (static chain), %r11, and on
 * return %rdx too; gcc's -fipa-ra may also keep values in caller-saved
 * registers across calls it can see into. The hooks in trampoline.c touch
 * no vector register; when they need the C library, lapse_vsave_call saves
 * the whole vector and x87 state (XSAVE, else FXSAVE) around it. */

#include "stubs.h"

#define HOOK_DUE HOOK_DUE_CODE
/* struct lapse_hook (rt.h: fn, slot, aux, ret, then what the hook keeps
 * there), below the saved registers */
#define H_BYTES HOOK_BYTES
#define SAVED -72 /* the nine saved registers end here */
#define SAVED_R11 -72
#define H_AT (SAVED - H_BYTES)
#define H_FN (H_AT + HOOK_FN)
#define H_SLOT (H_AT + HOOK_SLOT)
#define H_AUX (H_AT + HOOK_AUX)
#define H_RET (H_AT + HOOK_RET)

.macro SAVE_GPRS
    pushq %rax
    pushq %rcx
    pushq %rdx
    pushq %rsi
    pushq %rdi
    pushq %r8
    pushq %r9
    pushq %r10
    pushq %r11
.endm

.macro RESTORE_GPRS
    leaq SAVED(%rbp), %rsp
    popq %r11
    popq %r10
    popq %r9
    popq %r8
    popq %rdi
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rax
.endm

/* Calls \hook(&hook); on HOOK_DUE or HOOK_REDO, \slow (or lapse_hook_due)
 * with the vector state saved. */
.macro RUN_HOOK hook, slow
    leaq H_AT(%rbp), %rdi
    call \hook
    testl %eax, %eax
    jz 9f
    leaq \slow(%rip), %rdi
    cmpl $HOOK_DUE, %eax
    jne 8f
    leaq lapse_hook_due(%rip), %rdi
8:  leaq H_AT(%rbp), %rsi
    call lapse_vsave_call
9:
.endm

    .text

/* ---- -pg -mfentry ---- */
    .globl __fentry__
    .type __fentry__, @function
    .p2align 4
__fentry__:
    .cfi_startproc
    endbr64
    pushq %rbp
    .cfi_def_cfa_offset 16
    .cfi_offset %rbp, -16
    movq %rsp, %rbp
    .cfi_def_cfa_register %rbp
    SAVE_GPRS
    subq $H_BYTES, %rsp
    andq $-16, %rsp
    movq 8(%rbp), %rax
    movq %rax, H_FN(%rbp)      /* just after the call: in the function */
    leaq 16(%rbp), %rax
    movq %rax, H_SLOT(%rbp)    /* the function's own return address */
    movq $0, H_AUX(%rbp)
    RUN_HOOK lapse_hook_enter, lapse_hook_enter_slow
    RESTORE_GPRS
    popq %rbp
    .cfi_def_cfa %rsp, 8
    ret
    .cfi_endproc
    .size __fentry__, .-__fentry__

/* ---- -pg ---- */
    .globl mcount
    .type mcount, @function
    .globl _mcount
    .type _mcount, @function
    .p2align 4
mcount:
_mcount:
    .cfi_startproc
    endbr64
    pushq %rbp
    .cfi_def_cfa_offset 16
    .cfi_offset %rbp, -16
    movq %rsp, %rbp
    .cfi_def_cfa_register %rbp
    SAVE_GPRS
    subq $H_BYTES, %rsp
    andq $-16, %rsp
    movq 8(%rbp), %rax
    movq %rax, H_FN(%rbp)      /* just after the call: in the function */
    movq (%rbp), %rax          /* the function's frame pointer */
    leaq 8(%rax), %rax
    movq %rax, H_SLOT(%rbp)    /* its return address */
    movq $0, H_AUX(%rbp)
    RUN_HOOK lapse_hook_enter, lapse_hook_enter_slow
    RESTORE_GPRS
    popq %rbp
    .cfi_def_cfa %rsp, 8
    ret
    .cfi_endproc
    .size mcount, .-mcount
    .size _mcount, .-_mcount

/* ---- library calls ----
 * One stub per redirected import (libcalls.c): the import's GOT slot holds
 * its address. Stub i puts i in %r11 (free at a call through the PLT or
 * GOT) and goes to lapse_libcall_entry, which hooks the call as the probes
 * above do, its record (lapse_imports[i]) as the hook's aux, and then jumps
 * to the record's target with every register and the stack as the caller
 * left them. */
    .hidden lapse_libcall_stubs
    .globl lapse_libcall_stubs
    .p2align 4
lapse_libcall_stubs:
    .set stub_n, 0
    .rept LIBCALL_STUBS
    endbr64
    movl $stub_n, %r11d
    jmp lapse_libcall_entry
    .p2align 4
    .set stub_n, stub_n + 1
    .endr

    .p2align 4
    .type lapse_libcall_entry, @function
lapse_libcall_entry:
    .cfi_startproc
    pushq %rbp
    .cfi_def_cfa_offset 16
    .cfi_offset %rbp, -16
    movq %rsp, %rbp
    .cfi_def_cfa_register %rbp
    SAVE_GPRS
    subq $H_BYTES, %rsp
    andq $-16, %rsp
    movl %r11d, %eax
    shlq $IMPORT_SHIFT, %rax
    leaq lapse_imports(%rip), %rdx
    addq %rdx, %rax
    movq %rax, H_AUX(%rbp)
    movq IMPORT_FN(%rax), %rdx
    movq %rdx, H_FN(%rbp)      /* the library function */
    leaq 8(%rbp), %rdx
    movq %rdx, H_SLOT(%rbp)    /* the caller's return address */
    RUN_HOOK lapse_libcall_hook, lapse_libcall_hook_slow
    /* the target (read now: a lazily bound slot may have been taken over)
     * goes where the saved %r11 is, so restoring the registers loads it */
    movq H_AUX(%rbp), %rax
    movq IMPORT_TARGET(%rax), %rax
    movq %rax, SAVED_R11(%rbp)
    RESTORE_GPRS
    popq %rbp
    .cfi_def_cfa %rsp, 8
    jmp *%r11
    .cfi_endproc
    .size lapse_libcall_entry, .-lapse_libcall_entry

/* ---- run-time patching (patch.c) ----
 * A patched function's entry jumps to its stub in the stub region, which
 * the recorder built (lapse-record's instrument/patch):
 *     S-8:  .quad F - S             (F: the function's start)
 *     S+0:  lea -128(%rsp), %rsp    (past the red zone; lea keeps the flags)
 *     S+5:  call *entry(%rip)       (the region's word for this routine)
 *     S+11: lea 128(%rsp), %rsp
 *     S+19: the displaced instructions, relocated; jmp back
 * So the return address into the stub is S+11, and the function's own
 * return address is 8 + 128 bytes above it. Unlike __fentry__ (whose caller
 * is a compiler that knows the flags are dead there), this one preserves
 * the flags too: hand-written code may be patched. The status flags are
 * kept with lahf/sahf and seto (1-2 ns a call; pushfq/popfq cost 5 ns
 * on calls.c); the hooks change no other flag (DF, AC, TF). */
#define PATCH_CALL_END 11
    .hidden lapse_patch_entry
    .globl lapse_patch_entry
    .type lapse_patch_entry, @function
    .p2align 4
lapse_patch_entry:
    .cfi_startproc
    leaq -8(%rsp), %rsp        /* (the flags' word; lea changes no flag) */
    .cfi_adjust_cfa_offset 8
    pushq %rbp
    .cfi_adjust_cfa_offset 8
    .cfi_offset %rbp, -24
    movq %rsp, %rbp
    .cfi_def_cfa_register %rbp
    SAVE_GPRS
    seto %al                   /* OF, then SF ZF AF PF CF: nothing above */
    lahf                       /* changed a flag (push, mov and lea do not) */
    movw %ax, 8(%rbp)
    subq $H_BYTES, %rsp
    andq $-16, %rsp
    movq 16(%rbp), %rax        /* S+11 */
    movq -(PATCH_CALL_END + 8)(%rax), %rdx
    leaq -PATCH_CALL_END(%rax,%rdx), %rax
    movq %rax, H_FN(%rbp)      /* F */
    leaq (24 + 128)(%rbp), %rax
    movq %rax, H_SLOT(%rbp)    /* F's return address */
    movq $0, H_AUX(%rbp)
    RUN_HOOK lapse_hook_enter, lapse_hook_enter_slow
    movw 8(%rbp), %ax
    addb $0x7f, %al            /* OF set if it was (0x7f + 1 overflows) */
    sahf                       /* SF ZF AF PF CF as they were; OF kept */
    RESTORE_GPRS
    popq %rbp
    .cfi_def_cfa %rsp, 16
    leaq 8(%rsp), %rsp
    .cfi_adjust_cfa_offset -8
    ret
    .cfi_endproc
    .size lapse_patch_entry, .-lapse_patch_entry

/* The stub of an entry of the program's own unwinder (a static libgcc's
 * _Unwind_RaiseException and kin) calls this instead, before the
 * unwinder's first instruction: every hooked frame gets its real return
 * address back before the unwinder walks them (unwind.c). At a function's
 * entry the flags and vector registers are dead; the argument registers
 * and %rax are kept. */
    .hidden lapse_patch_unwind
    .globl lapse_patch_unwind
    .type lapse_patch_unwind, @function
    .p2align 4
lapse_patch_unwind:
    .cfi_startproc
    pushq %rbp
    .cfi_adjust_cfa_offset 8
    .cfi_offset %rbp, -16
    movq %rsp, %rbp
    .cfi_def_cfa_register %rbp
    SAVE_GPRS
    andq $-16, %rsp
    call lapse_unwind_begins
    RESTORE_GPRS
    popq %rbp
    .cfi_def_cfa %rsp, 8
    ret
    .cfi_endproc
    .size lapse_patch_unwind, .-lapse_patch_unwind

/* ---- sanitizer coverage (sancov.c) ----
 * Reached by a jump from the program's __sanitizer_cov_trace_pc_guard
 * (sancov_stub.c), so the return address on the stack is the one into the
 * instrumented function, and %rsp + 8 its stack pointer at the call. A
 * plain call for that function: the C half may use any register the ABI
 * lets a callee use, and returns to it directly. */
    .hidden lapse_sancov_entry
    .globl lapse_sancov_entry
    .type lapse_sancov_entry, @function
    .p2align 4
lapse_sancov_entry:
    .cfi_startproc
    endbr64
    movq %rbp, %rdx            /* its frame pointer */
    leaq 8(%rsp), %rsi         /* its stack pointer at the call */
    movq (%rsp), %rcx          /* the hook's return address */
    jmp lapse_sancov_hook
    .cfi_endproc
    .size lapse_sancov_entry, .-lapse_sancov_entry

/* ---- the return trampoline ----
 * A hooked function's `ret` lands here with %rsp just above the slot that
 * held this address. The slot becomes this frame's own return address: the
 * hook writes the real one there and the trampoline jumps to it. Unwinders
 * stop here (the return address is undefined): before an unwinder walks a
 * stack, the runtime writes the real addresses back (unwind.c). */
    .hidden lapse_tramp_return
    .globl lapse_tramp_return
    .type lapse_tramp_return, @function
    .p2align 4
    .cfi_startproc
    .cfi_undefined %rip
    nop                        /* (return address - 1 is inside this FDE) */
lapse_tramp_return:
    subq $8, %rsp
    pushq %rbp
    movq %rsp, %rbp
    SAVE_GPRS
    subq $H_BYTES, %rsp
    andq $-16, %rsp
    leaq 8(%rbp), %rax
    movq %rax, H_SLOT(%rbp)
    RUN_HOOK lapse_hook_exit, lapse_hook_exit_slow
    movq H_RET(%rbp), %rax
    movq %rax, 8(%rbp)
    RESTORE_GPRS
    popq %rbp
    /* `ret` here would always be mispredicted (the return stack no longer
     * matches); an indirect jump through the slot is predicted like any.
     * The slot is then in the caller's red zone, which signal delivery
     * leaves alone, and which no caller keeps anything in across a call. */
    leaq 8(%rsp), %rsp
    jmp *-8(%rsp)
    .cfi_endproc
    .size lapse_tramp_return, .-lapse_tramp_return

/* ---- calling C with the vector state saved ----
 * lapse_vsave_call(fn, arg): fn(arg) with every vector, mask and x87
 * register the program may hold saved around it (XSAVE of the components
 * XCR0 enables, AMX tiles left out; FXSAVE without XSAVE). Called with
 * %rsp 16-byte aligned. */
    .hidden lapse_vsave_call
    .globl lapse_vsave_call
    .type lapse_vsave_call, @function
    .p2align 4
lapse_vsave_call:
    .cfi_startproc
    pushq %rbp
    .cfi_def_cfa_offset 16
    .cfi_offset %rbp, -16
    movq %rsp, %rbp
    .cfi_def_cfa_register %rbp
    pushq %rbx
    .cfi_offset %rbx, -24
    pushq %r12
    .cfi_offset %r12, -32
    movq %rdi, %rbx
    movq %rsi, %r12
    cmpl $0, lapse_vsave_mode(%rip)
    jne 1f
    call lapse_vstate_init
1:  subq lapse_vsave_bytes(%rip), %rsp
    andq $-64, %rsp
    cmpl $2, lapse_vsave_mode(%rip)
    jne 3f
    xorl %eax, %eax
    movq %rax, 512(%rsp)       /* the XSAVE header must start out zero */
    movq %rax, 520(%rsp)
    movq %rax, 528(%rsp)
    movq %rax, 536(%rsp)
    movq %rax, 544(%rsp)
    movq %rax, 552(%rsp)
    movq %rax, 560(%rsp)
    movq %rax, 568(%rsp)
    movl lapse_vsave_mask(%rip), %eax
    movl lapse_vsave_mask+4(%rip), %edx
    xsave64 (%rsp)
    movq %r12, %rdi
    call *%rbx
    movq %rax, %rbx
    movl lapse_vsave_mask(%rip), %eax
    movl lapse_vsave_mask+4(%rip), %edx
    xrstor64 (%rsp)
    jmp 4f
3:  fxsave64 (%rsp)
    movq %r12, %rdi
    call *%rbx
    movq %rax, %rbx
    fxrstor64 (%rsp)
4:  movq %rbx, %rax
    leaq -16(%rbp), %rsp
    popq %r12
    popq %rbx
    popq %rbp
    .cfi_def_cfa %rsp, 8
    ret
    .cfi_endproc
    .size lapse_vsave_call, .-lapse_vsave_call

    .section .note.GNU-stack, "", @progbits
