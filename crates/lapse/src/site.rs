//! The site record: what a probe's event names, as bytes in the program's
//! file.
//!
//! Every `#[lapse::profile]` function and every `lapse::scope!` is one
//! `static` [`Site`] placed in the ELF section [`SECTION`] (`#[used]`, so
//! the linker keeps it). The address of that static is the "function
//! address" of the site's events; the recorder finds the address inside the
//! module's `lapse_sites` section and reads the record from the file to
//! name the function (`lapse-symbols`, `sites.rs`).
//!
//! Layout (`#[repr(C)]`, native byte order, 4-byte aligned, no padding
//! between fields, no pointer, so no relocation: the bytes in the file are
//! the static's bytes):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | [`MAGIC`] |
//! | 8 | 4 | kind: [`KIND_FUNCTION`] or [`KIND_SCOPE`] |
//! | 12 | 4 | line (`line!()`; 0 when unknown) |
//! | 16 | 4 | name length in bytes |
//! | 20 | 4 | file length in bytes |
//! | 24 | name + file | the name (UTF-8), then the file (`file!()`) |
//!
//! Keep this in step with `crates/lapse-symbols/src/sites.rs`, which reads
//! it (a test there reads sites made by this crate).

/// The section holding every site record. A C identifier, so the linker
/// also defines `__start_lapse_sites`/`__stop_lapse_sites`.
pub const SECTION: &str = "lapse_sites";

/// The first bytes of every site record: "lapse site, layout 1".
pub const MAGIC: [u8; 8] = *b"LAPSITE1";

/// The site is a function (`#[lapse::profile]`).
pub const KIND_FUNCTION: u32 = 1;
/// The site is a block (`lapse::scope!`).
pub const KIND_SCOPE: u32 = 2;

/// Bytes before the name: magic, kind, line, two lengths.
pub const HEADER_LEN: usize = 24;

/// One probe site; `N` is the length of its name plus its file name.
///
/// Made in a `static` by the macros, never at run time: [`Site::new`] is a
/// `const fn` so the whole record is computed by the compiler.
#[repr(C)]
pub struct Site<const N: usize> {
    magic: [u8; 8],
    kind: u32,
    line: u32,
    name_len: u32,
    file_len: u32,
    text: [u8; N],
}

impl<const N: usize> Site<N> {
    /// The record for `name` at `file`:`line`. `N` must be
    /// `name.len() + file.len()` (a mismatch fails to compile where the
    /// static is made).
    pub const fn new(kind: u32, line: u32, name: &str, file: &str) -> Site<N> {
        let (name, file) = (name.as_bytes(), file.as_bytes());
        assert!(
            name.len() + file.len() == N,
            "lapse: a site's length is its name's plus its file's"
        );
        assert!(N <= u32::MAX as usize, "lapse: a site's name is too long");
        let mut text = [0u8; N];
        let mut i = 0;
        while i < name.len() {
            text[i] = name[i];
            i += 1;
        }
        let mut j = 0;
        while j < file.len() {
            text[name.len() + j] = file[j];
            j += 1;
        }
        Site {
            magic: MAGIC,
            kind,
            line,
            name_len: name.len() as u32,
            file_len: file.len() as u32,
            text,
        }
    }

    /// The name the site's events are recorded under.
    pub fn name(&self) -> &str {
        let name = &self.text[..self.name_len as usize];
        // (made from a &str by `new`, which is the only constructor)
        core::str::from_utf8(name).unwrap_or("")
    }

    /// The source file (`file!()`) and line of the site.
    pub fn location(&self) -> (&str, u32) {
        let file = &self.text[self.name_len as usize..];
        (core::str::from_utf8(file).unwrap_or(""), self.line)
    }

    /// [`KIND_FUNCTION`] or [`KIND_SCOPE`].
    pub fn kind(&self) -> u32 {
        self.kind
    }

    /// The record's address: what the site's events carry.
    pub fn address(&'static self) -> *const u8 {
        (self as *const Site<N>).cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The record's bytes, as the ELF file holds them.
    fn bytes<const N: usize>(site: &Site<N>) -> &[u8] {
        // SAFETY: Site is repr(C) with no padding (checked below), so every
        // byte of it is initialised.
        unsafe {
            core::slice::from_raw_parts(
                (site as *const Site<N>).cast::<u8>(),
                core::mem::size_of::<Site<N>>(),
            )
        }
    }

    #[test]
    fn layout_is_the_documented_one() {
        static SITE: Site<11> = Site::new(KIND_SCOPE, 42, "abc", "src/x.rs");
        let b = bytes(&SITE);
        assert_eq!(core::mem::align_of::<Site<11>>(), 4);
        assert_eq!(
            b.len(),
            HEADER_LEN + 11 + 1,
            "(4-byte aligned: one byte of tail)"
        );
        assert_eq!(&b[0..8], b"LAPSITE1");
        assert_eq!(b[8..12], KIND_SCOPE.to_ne_bytes());
        assert_eq!(b[12..16], 42u32.to_ne_bytes());
        assert_eq!(b[16..20], 3u32.to_ne_bytes());
        assert_eq!(b[20..24], 8u32.to_ne_bytes());
        assert_eq!(&b[24..35], b"abcsrc/x.rs");
        assert_eq!(SITE.name(), "abc");
        assert_eq!(SITE.location(), ("src/x.rs", 42));
        assert_eq!(SITE.kind(), KIND_SCOPE);
    }

    #[test]
    fn empty_and_unicode_names() {
        static EMPTY: Site<0> = Site::new(KIND_FUNCTION, 0, "", "");
        assert_eq!(bytes(&EMPTY).len(), HEADER_LEN);
        assert_eq!((EMPTY.name(), EMPTY.location()), ("", ("", 0)));
        static UNI: Site<6> = Site::new(KIND_FUNCTION, 1, "ü→", "a");
        assert_eq!(UNI.name(), "ü→");
        assert_eq!(UNI.location(), ("a", 1));
    }
}
