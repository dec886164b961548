/* stubs.h - what x86_64.S and the C files must agree on; plain #defines so
 * that the assembler can include it too (the C side checks each against
 * the real layout, see trampoline.c and libcalls.c). */
#ifndef LAPSE_STUBS_H
#define LAPSE_STUBS_H

/* struct lapse_hook, kept by a stub below its saved registers */
#define HOOK_BYTES 112
#define HOOK_FN 0
#define HOOK_SLOT 8
#define HOOK_AUX 16
#define HOOK_RET 24

/* hooks' answers (enum in rt.h) */
#define HOOK_DUE_CODE 1

/* library calls: one 16-byte stub per import, and its record */
#define LIBCALL_STUBS 8192
#define LIBCALL_STUB_BYTES 16
#define IMPORT_SHIFT 6 /* sizeof(struct lapse_import) == 1 << IMPORT_SHIFT */
#define IMPORT_TARGET 0
#define IMPORT_FN 8

#endif
