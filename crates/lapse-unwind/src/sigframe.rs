//! Signal frames. When a signal handler runs, the kernel pushes the
//! interrupted registers (a `struct rt_sigframe`) on the stack and makes the
//! handler return into a trampoline that calls `rt_sigreturn`. glibc
//! describes that frame with DWARF expressions, which framehop does not
//! evaluate, so a stack sampled inside a handler would end at the
//! trampoline. lapse recognises the trampoline by its code and reads the
//! interrupted registers from the frame itself.
//!
//! x86-64 only: the trampoline is `mov $15, %rax; syscall` (glibc's
//! `__restore_rt`, and the same bytes in musl); elsewhere nothing is
//! recognised and stacks end at the trampoline as before.

use crate::stack::{StackCopy, UserRegs};

/// `mov $__NR_rt_sigreturn, %rax; syscall`.
#[cfg(target_arch = "x86_64")]
pub(crate) const TRAMPOLINE: &[u8] = &[0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];
#[cfg(not(target_arch = "x86_64"))]
pub(crate) const TRAMPOLINE: &[u8] = &[];

/// Byte offset of `uc_mcontext.gregs` in the kernel's `ucontext`
/// (`uc_flags`, `uc_link`, then the 24-byte `uc_stack`).
const GREGS: u64 = 40;
/// Indexes in `gregs` (`REG_RBP`, `REG_RSP`, `REG_RIP` of `<sys/ucontext.h>`).
const RBP: u64 = 10;
const RSP: u64 = 15;
const RIP: u64 = 16;

/// The registers the signal interrupted, given the stack pointer just after
/// the handler returned into the trampoline (the trampoline's address was
/// the frame's first word, so `sp` now points at the `ucontext`).
pub(crate) fn interrupted_regs(sp: u64, stack: &StackCopy<'_>) -> Option<UserRegs> {
    if TRAMPOLINE.is_empty() {
        return None;
    }
    let gregs = sp.checked_add(GREGS)?;
    let reg = |i: u64| stack.read_u64(gregs.checked_add(i * 8)?);
    Some(UserRegs {
        ip: reg(RIP)?,
        sp: reg(RSP)?,
        fp: reg(RBP)?,
        lr: 0,
    })
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[test]
    fn registers_come_from_the_ucontext() {
        let mut bytes = vec![0u8; 512];
        let put = |b: &mut Vec<u8>, at: u64, v: u64| {
            b[at as usize..at as usize + 8].copy_from_slice(&v.to_le_bytes())
        };
        put(&mut bytes, GREGS + RBP * 8, 0x7ff0);
        put(&mut bytes, GREGS + RSP * 8, 0x7fe0);
        put(&mut bytes, GREGS + RIP * 8, 0x401234);
        let stack = StackCopy {
            start: 0x1000,
            bytes: &bytes,
        };
        let regs = interrupted_regs(0x1000, &stack).expect("inside the copy");
        assert_eq!((regs.ip, regs.sp, regs.fp), (0x401234, 0x7fe0, 0x7ff0));
        assert!(interrupted_regs(0x1000 + 400, &stack).is_none());
    }
}
