//! PLT stubs, named as `objdump` and `perf` name them: `foo@plt`.
//!
//! A stub is a jump through a GOT slot, and the module's dynamic relocations
//! say which symbol each slot is bound to; the symbol table has no entry for
//! the stubs themselves. So each stub's jump is decoded (x86-64: `jmp
//! *disp32(%rip)`, with or without `endbr64`/`bnd`; aarch64: `adrp x16` +
//! `ldr x17, [x16, #off]`) to find its slot, and the slot's relocation names
//! it. What is in a PLT section and names nothing (the lazy-binding header,
//! IBT's push stubs) is named after the section: `[.plt]`.

use std::collections::HashMap;

use object::{Architecture, Object, ObjectSection, ObjectSymbol, ObjectSymbolTable};

/// A synthetic symbol: start, size and name (with its `@plt` suffix).
pub(crate) struct Stub {
    pub start: u64,
    pub size: u64,
    /// The bound symbol's (mangled, unversioned) name, or `None` for a
    /// part of the section that names nothing.
    pub target: Option<String>,
    pub section: &'static str,
}

const SECTIONS: [&str; 3] = [".plt", ".plt.sec", ".plt.got"];

/// Every stub of the module's PLT sections.
pub(crate) fn stubs(file: &object::File<'_>) -> Vec<Stub> {
    let slots = got_slots(file);
    let mut out = Vec::new();
    for name in SECTIONS {
        let Some(section) = file.section_by_name(name) else {
            continue;
        };
        let Ok(data) = section.data() else { continue };
        let addr = section.address();
        match file.architecture() {
            Architecture::X86_64 => x86_64(addr, data, name, &slots, &mut out),
            Architecture::Aarch64 => aarch64(addr, data, name, &slots, &mut out),
            _ => {}
        }
    }
    out
}

/// GOT slot address → the (unversioned) name of the symbol it is bound to.
fn got_slots(file: &object::File<'_>) -> HashMap<u64, String> {
    let mut slots = HashMap::new();
    let (Some(relocations), Some(dynsym)) =
        (file.dynamic_relocations(), file.dynamic_symbol_table())
    else {
        return slots;
    };
    for (slot, r) in relocations {
        let object::RelocationTarget::Symbol(index) = r.target() else {
            continue;
        };
        let Ok(sym) = dynsym.symbol_by_index(index) else {
            continue;
        };
        if let Ok(name) = sym.name() {
            let name = name.split('@').next().unwrap_or(name);
            if !name.is_empty() {
                slots.insert(slot, name.to_owned());
            }
        }
    }
    slots
}

/// x86-64: 16-byte entries (8 in a `.plt.got` without IBT), each with one
/// `jmp *disp32(%rip)` (`ff 25`), possibly after `endbr64` and `bnd`.
fn x86_64(
    addr: u64,
    data: &[u8],
    section: &'static str,
    slots: &HashMap<u64, String>,
    out: &mut Vec<Stub>,
) {
    const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];
    let entry = if section == ".plt.got" && !data.starts_with(&ENDBR64) {
        8
    } else {
        16
    };
    for (i, e) in data.chunks_exact(entry).enumerate() {
        let at = (i * entry) as u64;
        let target = e.windows(6).enumerate().find_map(|(k, w)| {
            if w[0] != 0xff || w[1] != 0x25 {
                return None;
            }
            let disp = i32::from_le_bytes([w[2], w[3], w[4], w[5]]);
            let next = addr.wrapping_add(at + k as u64 + 6);
            slots
                .get(&next.wrapping_add_signed(i64::from(disp)))
                .cloned()
        });
        out.push(Stub {
            start: addr + at,
            size: entry as u64,
            target,
            section,
        });
    }
}

/// aarch64: 16-byte entries after a 32-byte header in `.plt`: `adrp x16,
/// page`, `ldr x17, [x16, #off]`, `add x16, x16, #off`, `br x17`.
fn aarch64(
    addr: u64,
    data: &[u8],
    section: &'static str,
    slots: &HashMap<u64, String>,
    out: &mut Vec<Stub>,
) {
    let word = |b: &[u8], i: usize| {
        b.get(i..i + 4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
    };
    let header = if section == ".plt" { 32 } else { 0 };
    if header > 0 && data.len() >= header {
        out.push(Stub {
            start: addr,
            size: header as u64,
            target: None,
            section,
        });
    }
    let Some(body) = data.get(header..) else {
        return;
    };
    for (i, e) in body.chunks_exact(16).enumerate() {
        let pc = addr + (header + i * 16) as u64;
        let target = match (word(e, 0), word(e, 4)) {
            (Some(adrp), Some(ldr)) => adrp_ldr_slot(pc, adrp, ldr),
            _ => None,
        }
        .and_then(|slot| slots.get(&slot).cloned());
        out.push(Stub {
            start: pc,
            size: 16,
            target,
            section,
        });
    }
}

/// The address `adrp x16, page` at `pc` then `ldr x17, [x16, #off]` load from.
fn adrp_ldr_slot(pc: u64, adrp: u32, ldr: u32) -> Option<u64> {
    // adrp: 1 immlo(2) 10000 immhi(19) Rd(5); ldr (64-bit, unsigned offset):
    // 1111 1001 01 imm12 Rn Rt.
    if adrp & 0x9f00_0000 != 0x9000_0000 || ldr & 0xffc0_0000 != 0xf940_0000 {
        return None;
    }
    let imm21 = (((adrp >> 5) & 0x7_ffff) << 2) | ((adrp >> 29) & 3);
    let pages = i64::from(((imm21 << 11) as i32) >> 11); // sign-extended
    let page = (pc & !0xfff).wrapping_add_signed(pages << 12);
    let offset = u64::from((ldr >> 10) & 0xfff) * 8;
    Some(page.wrapping_add(offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x86_64_stubs_with_and_without_ibt() {
        let mut slots = HashMap::new();
        slots.insert(0x4018, "puts".to_owned());
        slots.insert(0x4020, "malloc".to_owned());
        // .plt at 0x1020: header (push; jmp *GOT+16 - no relocation), then
        // `jmp *0x4018(%rip)`-style entries.
        let mut plt = vec![
            0xff, 0x35, 0, 0, 0, 0, 0xff, 0x25, 0, 0, 0, 0, 0x0f, 0x1f, 0x40, 0,
        ];
        let entry = |at: u64, slot: u64| {
            let disp = (slot as i64 - (at as i64 + 6)) as i32;
            let mut e = vec![0xff, 0x25];
            e.extend_from_slice(&disp.to_le_bytes());
            e.extend_from_slice(&[0x68, 0, 0, 0, 0, 0xe9, 0, 0, 0, 0]);
            e
        };
        plt.extend(entry(0x1030, 0x4018));
        plt.extend(entry(0x1040, 0x4020));
        let mut out = Vec::new();
        x86_64(0x1020, &plt, ".plt", &slots, &mut out);
        let got: Vec<(u64, Option<&str>)> =
            out.iter().map(|s| (s.start, s.target.as_deref())).collect();
        assert_eq!(
            got,
            [
                (0x1020, None),
                (0x1030, Some("puts")),
                (0x1040, Some("malloc"))
            ]
        );
        // .plt.sec (IBT): endbr64; bnd jmp *disp(%rip); nop.
        let disp = (0x4018i64 - (0x1100 + 4 + 1 + 6)) as i32;
        let mut sec = vec![0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25];
        sec.extend_from_slice(&disp.to_le_bytes());
        sec.extend_from_slice(&[0x0f, 0x1f, 0x44, 0, 0]);
        let mut out = Vec::new();
        x86_64(0x1100, &sec, ".plt.sec", &slots, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(
            (out[0].start, out[0].target.as_deref()),
            (0x1100, Some("puts"))
        );
    }

    #[test]
    fn aarch64_adrp_ldr_pairs() {
        // At pc 0x10410: adrp x16, 0x20000 (+0x10 pages); ldr x17, [x16, #0x18].
        let pc = 0x10410u64;
        let pages = (0x20000 - (pc & !0xfff)) >> 12; // 0x10
        let immlo = (pages & 3) as u32;
        let immhi = (pages >> 2) as u32;
        let adrp = 0x9000_0000 | (immlo << 29) | (immhi << 5) | 16;
        let ldr = 0xf940_0000 | ((0x18 / 8) << 10) | (16 << 5) | 17;
        assert_eq!(adrp_ldr_slot(pc, adrp, ldr), Some(0x20018));
        // A page below the PC.
        let back = 0x9000_0000u32 | (0x7_ffff << 5) | (3 << 29) | 16; // -1 page
        assert_eq!(adrp_ldr_slot(pc, back, ldr), Some(0xf018));
        assert_eq!(adrp_ldr_slot(pc, 0, ldr), None);
    }
}
