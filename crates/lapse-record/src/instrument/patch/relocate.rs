//! One function's patch: which instructions the 5-byte jump displaces,
//! whether they may move, and its stub, relocated by `iced-x86`'s
//! `BlockEncoder` (RIP-relative operands and branches get new
//! displacements; a short branch too far away becomes a near one).
//!
//! The stub (the runtime's `lapse_patch_entry` in `x86_64.S` reads it):
//!
//! ```text
//! S-8:  .quad F - S              the function's start, for the entry event
//! S+0:  lea -128(%rsp), %rsp     past the red zone (lea keeps the flags)
//! S+5:  call *entry(%rip)        the region's word holding lapse_patch_entry
//! S+11: lea 128(%rsp), %rsp
//! S+19: the displaced instructions, relocated; jmp back past them
//! ```
//!
//! A direct call may be the last displaced instruction (`sub $8,%rsp;
//! call f` starts many functions): the stub pushes the return address the
//! call would have pushed, in the function itself, and jumps to the callee,
//! so the callee returns into the function's own code, where unwinders
//! find its frame. A call anywhere else in the displaced bytes would return
//! into the stub, which no unwinder knows: such a function is skipped.

use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Code, Decoder, DecoderOptions, FlowControl, Instruction,
    InstructionBlock, MemoryOperand, Mnemonic, Register,
};

use super::Skip;

/// Bytes of the jump written at a site.
pub(super) const JMP: usize = lapse_rt::protocol::plan::JMP;
/// The stub's fixed head, up to its relocated instructions.
const HEAD: usize = 19;
/// Where the head's `call` ends (the return address `lapse_patch_entry` sees).
const CALL_END: usize = 11;
/// `endbr64`: kept in place (indirect branches land on it), the jump goes after.
const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// A function as the patcher sees it: addresses are virtual (the module's
/// addresses plus a constant that keeps every one positive).
pub(super) struct Function<'a> {
    pub start: u64,
    /// The function's bytes, as the file holds them.
    pub code: &'a [u8],
}

/// Where a function is patched and the instructions that move.
pub(super) struct Displaced {
    pub at: u64,
    pub len: usize,
    pub instructions: Vec<Instruction>,
}

impl Displaced {
    /// Whether the jump replaces only NOPs (a sled the compiler left for
    /// patching): nothing moves.
    pub fn only_nops(&self) -> bool {
        self.instructions
            .iter()
            .all(|i| i.mnemonic() == Mnemonic::Nop)
    }
}

/// Every place a branch, call or address computation in `f` points to
/// (a `lea` of a code address may be an indirect branch's target).
pub(super) fn targets(f: &Function<'_>, out: &mut Vec<u64>) {
    let mut d = Decoder::with_ip(64, f.code, f.start, DecoderOptions::NONE);
    let mut ins = Instruction::default();
    while d.can_decode() {
        d.decode_out(&mut ins);
        if ins.is_invalid() {
            continue;
        }
        let t = ins.near_branch_target();
        if t != 0 {
            out.push(t);
        }
        if ins.is_ip_rel_memory_operand() && ins.code() == Code::Lea_r64_m {
            out.push(ins.ip_rel_memory_address());
        }
    }
}

/// The instructions the jump at `f`'s entry (after an `endbr64`) displaces,
/// or why `f` is left alone.
pub(super) fn displaced(f: &Function<'_>) -> Result<Displaced, Skip> {
    let skip = if f.code.starts_with(&ENDBR64) { 4 } else { 0 };
    let at = f.start + skip as u64;
    let code = &f.code[skip.min(f.code.len())..];
    if code.len() < JMP {
        return Err(Skip::TooShort);
    }
    let mut d = Decoder::with_ip(64, code, at, DecoderOptions::NONE);
    let mut instructions = Vec::new();
    let mut len = 0;
    while len < JMP {
        if !d.can_decode() {
            return Err(Skip::TooShort);
        }
        let ins = d.decode();
        if ins.is_invalid() {
            return Err(Skip::Undecodable);
        }
        let last = len + ins.len() >= JMP;
        match ins.flow_control() {
            // (its return address would be in the stub, where no unwinder
            // finds a frame: an exception through it would be lost)
            FlowControl::Call if last && ins.code() == Code::Call_rel32_64 => {}
            FlowControl::Call | FlowControl::IndirectCall => return Err(Skip::CallInPrologue),
            FlowControl::Interrupt | FlowControl::Exception | FlowControl::XbeginXabortXend => {
                return Err(Skip::Unrelocatable)
            }
            _ => {}
        }
        len += ins.len();
        instructions.push(ins);
    }
    // (a loop inside the bytes that move would come back to the jump)
    let end = at + len as u64;
    if instructions
        .iter()
        .any(|i| (at..end).contains(&i.near_branch_target()))
    {
        return Err(Skip::BranchIntoPatch);
    }
    Ok(Displaced {
        at,
        len,
        instructions,
    })
}

/// A stub's bytes from `S - 8`, and where in them a value depends on the
/// distance between the stub and the function (see [`Fixup`]).
pub(super) struct Stub {
    pub bytes: Vec<u8>,
    pub fixups: Vec<Fixup>,
}

/// A field of a stub that holds a distance from the stub to the module's
/// code: moving the region by `d` bytes from where it was planned takes
/// `d` from it. The runtime does, when it cannot map the region where
/// planned (a shared library has others right below it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fixup {
    /// A `rel32` or `disp32` at this offset (from `S - 8`).
    Rel32(u32),
    /// The `.quad F - S` at this offset.
    Rel64(u32),
}

/// The stub for `f` at virtual address `stub` (its `S`), the word holding
/// the entry routine's address at `entry_slot`: the bytes from `S - 8`.
pub(super) fn stub(
    f: &Function<'_>,
    moved: &Displaced,
    stub: u64,
    entry_slot: u64,
) -> Result<Stub, Skip> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&(f.start.wrapping_sub(stub) as i64).to_le_bytes());
    out.extend_from_slice(&[0x48, 0x8d, 0x64, 0x24, 0x80]);
    let call = entry_slot.wrapping_sub(stub + CALL_END as u64) as i64;
    let call = i32::try_from(call).map_err(|_| Skip::Unrelocatable)?;
    out.extend_from_slice(&[0xff, 0x15]);
    out.extend_from_slice(&call.to_le_bytes());
    out.extend_from_slice(&[0x48, 0x8d, 0xa4, 0x24, 0x80, 0x00, 0x00, 0x00]);
    // (a NOP sled's instructions, or any NOP, need not run again)
    let mut block: Vec<Instruction> = moved
        .instructions
        .iter()
        .filter(|i| i.mnemonic() != Mnemonic::Nop)
        .copied()
        .collect();
    let end = moved.at + moved.len as u64;
    match block.pop() {
        Some(call) if call.code() == Code::Call_rel32_64 => block
            .extend(call_from(end, call.near_branch_target()).map_err(|_| Skip::Unrelocatable)?),
        Some(other) => {
            block.push(other);
            block.push(
                Instruction::with_branch(Code::Jmp_rel32_64, end)
                    .map_err(|_| Skip::Unrelocatable)?,
            );
        }
        None => block.push(
            Instruction::with_branch(Code::Jmp_rel32_64, end).map_err(|_| Skip::Unrelocatable)?,
        ),
    }
    let encoded = BlockEncoder::encode(
        64,
        InstructionBlock::new(&block, stub + HEAD as u64),
        BlockEncoderOptions::RETURN_RELOC_INFOS,
    )
    .map_err(|_| Skip::Unrelocatable)?;
    // (an absolute address in the stub would not follow ASLR)
    if !encoded.reloc_infos.is_empty() {
        return Err(Skip::Unrelocatable);
    }
    let mut fixups = vec![Fixup::Rel64(0)];
    let code = &encoded.code_buffer;
    let (from, to) = (stub - 8, stub + (HEAD + code.len()) as u64);
    let mut d = Decoder::with_ip(64, code, stub + HEAD as u64, DecoderOptions::NONE);
    let mut ins = Instruction::default();
    while d.can_decode() {
        let at = 8 + HEAD + d.position();
        d.decode_out(&mut ins);
        let co = d.get_constant_offsets(&ins);
        let (target, field, size) = if ins.is_ip_rel_memory_operand() {
            let t = ins.ip_rel_memory_address();
            (t, co.displacement_offset(), co.displacement_size())
        } else if ins.near_branch_target() != 0 {
            let t = ins.near_branch_target();
            (t, co.immediate_offset(), co.immediate_size())
        } else {
            continue;
        };
        if (from..to).contains(&target) {
            continue;
        }
        if size != 4 {
            return Err(Skip::Unrelocatable);
        }
        fixups.push(Fixup::Rel32((at + field) as u32));
    }
    out.extend_from_slice(code);
    Ok(Stub { bytes: out, fixups })
}

/// A call of `target` that returns to `ret`: its return address pushed
/// with every register and the flags kept (the word below the stack
/// pointer that `%rax` passes through is the callee's to clobber anyway).
fn call_from(ret: u64, target: u64) -> Result<Vec<Instruction>, iced_x86::IcedError> {
    Ok(vec![
        Instruction::with2(
            Code::Lea_r64_m,
            Register::RSP,
            MemoryOperand::with_base_displ(Register::RSP, -8),
        )?,
        Instruction::with1(Code::Push_r64, Register::RAX)?,
        Instruction::with2(
            Code::Lea_r64_m,
            Register::RAX,
            MemoryOperand::with_base_displ(Register::RIP, ret as i64),
        )?,
        Instruction::with2(
            Code::Mov_rm64_r64,
            MemoryOperand::with_base_displ(Register::RSP, 8),
            Register::RAX,
        )?,
        Instruction::with1(Code::Pop_r64, Register::RAX)?,
        Instruction::with_branch(Code::Jmp_rel32_64, target)?,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: u64 = 1 << 40;

    fn f(code: &[u8]) -> Function<'_> {
        Function { start: BASE, code }
    }

    #[test]
    fn a_frame_pointer_prologue_moves_whole_instructions() {
        // push %rbp; mov %rsp,%rbp; sub $0x10,%rsp
        let code = [0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x10, 0xc3];
        let d = displaced(&f(&code)).expect("patchable");
        assert_eq!((d.at, d.len, d.instructions.len()), (BASE, 8, 3));
    }

    #[test]
    fn endbr64_stays_and_the_jump_goes_after_it() {
        let code = [0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3];
        let d = displaced(&f(&code)).expect("patchable");
        assert_eq!((d.at, d.len), (BASE + 4, 5));
    }

    #[test]
    fn short_functions_calls_and_loops_in_the_jump_are_skipped() {
        assert_eq!(
            displaced(&f(&[0x31, 0xc0, 0xc3])).err(),
            Some(Skip::TooShort)
        );
        // call *%rax first; a call before the last displaced instruction
        let call = [0xff, 0xd0, 0x90, 0x90, 0x90, 0xc3];
        assert_eq!(displaced(&f(&call)).err(), Some(Skip::CallInPrologue));
        let early = [0xe8, 0, 0, 0, 0, 0xe8, 0, 0, 0, 0, 0xc3];
        assert!(displaced(&f(&early)).is_ok(), "the call is the last one");
        let mid = [0x90, 0xe8, 0, 0, 0, 0, 0x90, 0xc3];
        assert!(displaced(&f(&mid)).is_ok(), "the call is the last one");
        let not_last = [0x41, 0x5f, 0xe8, 0, 0, 0, 0, 0xc3];
        assert!(displaced(&f(&not_last)).is_ok());
        // L: dec %edi; jne L; ret
        let lp = [0xff, 0xcf, 0x75, 0xfc, 0xc3, 0x90];
        assert_eq!(displaced(&f(&lp)).err(), Some(Skip::BranchIntoPatch));
    }

    #[test]
    fn rip_relative_operands_are_relocated_into_the_stub() {
        // mov 0x100(%rip),%eax; ret
        let code = [0x8b, 0x05, 0x00, 0x01, 0x00, 0x00, 0xc3];
        let func = f(&code);
        let d = displaced(&func).expect("patchable");
        let s = BASE - 0x10000;
        let Stub { bytes, fixups } = stub(&func, &d, s, s - 8 - 16).expect("relocatable");
        // the relocated mov still reads BASE + 6 + 0x100
        let at = 8 + HEAD;
        let mut dec = Decoder::with_ip(64, &bytes[at..], s + HEAD as u64, DecoderOptions::NONE);
        let mov = dec.decode();
        assert_eq!(mov.ip_rel_memory_address(), BASE + 6 + 0x100);
        let back = dec.decode();
        assert_eq!(back.near_branch_target(), BASE + 6);
        assert_eq!(
            i64::from_le_bytes(bytes[..8].try_into().unwrap()),
            0x10000,
            "F - S"
        );
        // the .quad, the mov's disp32 and the jmp's rel32: not the call
        // of the entry word, which moves with the region
        let mov = (8 + HEAD + 2) as u32;
        let jmp = (8 + HEAD + 6 + 1) as u32;
        assert_eq!(
            fixups,
            [Fixup::Rel64(0), Fixup::Rel32(mov), Fixup::Rel32(jmp)]
        );
    }

    #[test]
    fn a_nop_sled_moves_nothing_and_the_stub_jumps_straight_back() {
        // -mnop-mcount's 5-byte nop, then lea 1(%rdi),%eax; ret
        let code = [0x0f, 0x1f, 0x44, 0, 0, 0x8d, 0x47, 0x01, 0xc3];
        let func = f(&code);
        let d = displaced(&func).expect("patchable");
        assert!(d.only_nops());
        let s = BASE - 0x10000;
        let bytes = stub(&func, &d, s, s - 24).expect("relocatable").bytes;
        let mut dec = Decoder::with_ip(
            64,
            &bytes[8 + HEAD..],
            s + HEAD as u64,
            DecoderOptions::NONE,
        );
        let back = dec.decode();
        assert_eq!(
            (back.code(), back.near_branch_target()),
            (Code::Jmp_rel32_64, BASE + 5)
        );
        assert!(!dec.can_decode(), "nothing else");
        let plain = [0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3];
        assert!(!displaced(&f(&plain)).expect("patchable").only_nops());
    }

    #[test]
    fn a_last_call_returns_into_the_function_itself() {
        // sub $8,%rsp; call +0x20; (the function goes on)
        let code = [0x48, 0x83, 0xec, 0x08, 0xe8, 0x20, 0, 0, 0, 0xc3];
        let func = f(&code);
        let d = displaced(&func).expect("patchable");
        assert_eq!(d.len, 9);
        let s = BASE - 0x10000;
        let bytes = stub(&func, &d, s, s - 24).expect("relocatable").bytes;
        let mut dec = Decoder::with_ip(
            64,
            &bytes[8 + HEAD..],
            s + HEAD as u64,
            DecoderOptions::NONE,
        );
        let mut got = Vec::new();
        while dec.can_decode() {
            got.push(dec.decode());
        }
        assert_eq!(got[0].code(), Code::Sub_rm64_imm8);
        assert_eq!(
            got[3].ip_rel_memory_address(),
            BASE + 9,
            "the return address"
        );
        let jmp = got
            .iter()
            .find(|i| i.code() == Code::Jmp_rel32_64)
            .expect("jmp");
        assert_eq!(jmp.near_branch_target(), BASE + 9 + 0x20, "the callee");
        assert!(!got.iter().any(|i| i.flow_control() == FlowControl::Call));
    }
}
