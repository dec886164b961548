//! A sample's user-mode state: registers and the copied top of the stack.

/// The user registers unwinding starts from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UserRegs {
    pub ip: u64,
    pub sp: u64,
    /// Frame pointer (`rbp` on x86-64, `x29` on aarch64).
    pub fp: u64,
    /// Link register (aarch64 only; ignored on x86-64).
    pub lr: u64,
}

/// Bytes of the user stack starting at `start` (the sampled `sp`).
#[derive(Clone, Copy, Debug)]
pub struct StackCopy<'a> {
    pub start: u64,
    pub bytes: &'a [u8],
}

impl StackCopy<'_> {
    /// The 8-byte little-endian word at absolute address `addr`, if copied.
    pub fn read_u64(&self, addr: u64) -> Option<u64> {
        let offset = usize::try_from(addr.checked_sub(self.start)?).ok()?;
        let end = offset.checked_add(8)?;
        let word: [u8; 8] = self.bytes.get(offset..end)?.try_into().ok()?;
        Some(u64::from_le_bytes(word))
    }
}

#[cfg(test)]
mod tests {
    use super::StackCopy;

    #[test]
    fn reads_only_inside_the_copy() {
        let bytes: Vec<u8> = (0u8..16).collect();
        let stack = StackCopy {
            start: 0x1000,
            bytes: &bytes,
        };
        assert_eq!(stack.read_u64(0x1000), Some(0x0706_0504_0302_0100));
        assert_eq!(stack.read_u64(0x1008), Some(0x0f0e_0d0c_0b0a_0908));
        assert_eq!(stack.read_u64(0x1009), None);
        assert_eq!(stack.read_u64(0xff8), None);
        assert_eq!(stack.read_u64(u64::MAX), None);
    }
}
