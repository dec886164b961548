//! One process' modules and the unwinder over them.

use std::ops::Range;

use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder};
use lapse_symbols::{SectionData, UnwindSections};

use crate::sigframe;
use crate::stack::{StackCopy, UserRegs};
use crate::MAX_FRAMES;

type Native = framehop::UnwinderNative<SectionData, framehop::MayAllocateDuringUnwind>;
type Cache = framehop::CacheNative<framehop::MayAllocateDuringUnwind>;

/// The code modules mapped in one process, ready to unwind its samples.
/// Cloning it gives a forked child the parent's modules.
pub struct ProcessUnwinder {
    unwinder: Native,
    cache: Cache,
    /// Each mapping's code, to recognise signal trampolines by their bytes.
    code: Vec<Code>,
}

#[derive(Clone)]
struct Code {
    avma: Range<u64>,
    bias: u64,
    text_svma: Range<u64>,
    text: SectionData,
}

impl Default for ProcessUnwinder {
    fn default() -> Self {
        ProcessUnwinder::new()
    }
}

impl Clone for ProcessUnwinder {
    fn clone(&self) -> Self {
        ProcessUnwinder {
            unwinder: self.unwinder.clone(),
            cache: Cache::new(),
            code: self.code.clone(),
        }
    }
}

impl ProcessUnwinder {
    pub fn new() -> ProcessUnwinder {
        ProcessUnwinder {
            unwinder: Native::new(),
            cache: Cache::new(),
            code: Vec::new(),
        }
    }

    /// Adds an executable mapping `avma` of a module whose module-relative
    /// addresses are `absolute - bias`. A module without unwind sections is
    /// still worth adding: its frames are then unwound with frame pointers.
    pub fn add_module(
        &mut self,
        name: &str,
        avma: Range<u64>,
        bias: u64,
        sections: &UnwindSections,
    ) {
        let range = |s: &Option<lapse_symbols::Section>| {
            s.as_ref()
                .map(|s| s.svma..s.svma.saturating_add(s.data.len() as u64))
        };
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: sections.text_svma.clone(),
            text: sections.text.clone(),
            got_svma: sections.got_svma.clone(),
            eh_frame_svma: range(&sections.eh_frame),
            eh_frame: sections.eh_frame.as_ref().map(|s| s.data.clone()),
            eh_frame_hdr_svma: range(&sections.eh_frame_hdr),
            eh_frame_hdr: sections.eh_frame_hdr.as_ref().map(|s| s.data.clone()),
            debug_frame: sections.debug_frame.as_ref().map(|s| s.data.clone()),
            ..Default::default()
        };
        if let (Some(text_svma), Some(text)) = (&sections.text_svma, &sections.text) {
            self.code.push(Code {
                avma: avma.clone(),
                bias,
                text_svma: text_svma.clone(),
                text: text.clone(),
            });
        }
        self.unwinder
            .add_module(Module::new(name.to_owned(), avma, bias, info));
    }

    /// Forgets the mapping that started at `avma_start` (munmap, exec).
    pub fn remove_module(&mut self, avma_start: u64) {
        self.unwinder.remove_module(avma_start);
        self.code.retain(|c| c.avma.start != avma_start);
    }

    /// True when `addr` is the start of a signal return trampoline.
    fn is_sigreturn(&self, addr: u64) -> bool {
        let want = sigframe::TRAMPOLINE;
        if want.is_empty() {
            return false;
        }
        let Some(c) = self.code.iter().find(|c| c.avma.contains(&addr)) else {
            return false;
        };
        let svma = addr.wrapping_sub(c.bias);
        let Some(offset) = svma.checked_sub(c.text_svma.start) else {
            return false;
        };
        let Ok(offset) = usize::try_from(offset) else {
            return false;
        };
        c.text.get(offset..offset.saturating_add(want.len())) == Some(want)
    }

    /// Unwinds one sample into `out` (cleared first): absolute lookup
    /// addresses, innermost first. Stops at the root, at the end of the
    /// stack copy, at the first address it cannot unwind, or at
    /// [`MAX_FRAMES`]; says which.
    pub fn unwind(
        &mut self,
        regs: &UserRegs,
        stack: &StackCopy<'_>,
        out: &mut Vec<u64>,
    ) -> StackEnd {
        out.clear();
        if regs.ip == 0 {
            return StackEnd::Root;
        }
        let copy_end = stack.start.saturating_add(stack.bytes.len() as u64);
        let mut read = |addr: u64| stack.read_u64(addr).ok_or(());
        let mut regs_now = native_regs(regs);
        let mut address = FrameAddress::from_instruction_pointer(regs.ip);
        out.push(regs.ip);
        while out.len() < MAX_FRAMES {
            let next =
                match self
                    .unwinder
                    .unwind_frame(address, &mut regs_now, &mut self.cache, &mut read)
                {
                    Ok(Some(next)) => next,
                    // The stack goes on beyond the bytes the kernel copied.
                    Err(framehop::Error::CouldNotReadStack(at)) if at >= copy_end => {
                        return StackEnd::CopyEnd
                    }
                    // `Err` is also how a stack whose root was not recognised ends.
                    Ok(None) | Err(_) => return StackEnd::Root,
                };
            if self.is_sigreturn(next) {
                // The handler returns into the trampoline: the interrupted
                // code continues the stack, at its exact instruction.
                let Some(interrupted) = sigframe::interrupted_regs(regs_now.sp(), stack) else {
                    return StackEnd::Root;
                };
                if interrupted.ip == 0 {
                    return StackEnd::Root;
                }
                regs_now = native_regs(&interrupted);
                address = FrameAddress::from_instruction_pointer(interrupted.ip);
                out.push(interrupted.ip);
                continue;
            }
            let Some(ret) = FrameAddress::from_return_address(next) else {
                return StackEnd::Root;
            };
            address = ret;
            out.push(ret.address_for_lookup());
        }
        StackEnd::DepthLimit
    }
}

/// Why [`ProcessUnwinder::unwind`] stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackEnd {
    /// At the outermost frame, or at a frame it could not unwind.
    Root,
    /// At a read beyond the end of the stack copy: when the kernel copied
    /// all it was asked for, the stack was cut there.
    CopyEnd,
    /// At [`MAX_FRAMES`].
    DepthLimit,
}

#[cfg(target_arch = "x86_64")]
fn native_regs(regs: &UserRegs) -> framehop::UnwindRegsNative {
    framehop::UnwindRegsNative::new(regs.ip, regs.sp, regs.fp)
}

#[cfg(target_arch = "aarch64")]
fn native_regs(regs: &UserRegs) -> framehop::UnwindRegsNative {
    framehop::UnwindRegsNative::new(regs.lr, regs.sp, regs.fp)
}
