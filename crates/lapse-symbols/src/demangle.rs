//! Symbol names as people read them: Rust (legacy and v0) and C++ (Itanium).

/// Demangles `name` when it is a Rust or C++ mangled name; returns it
/// unchanged otherwise. Rust hashes are dropped (`{:#}` form), as `perf` and
/// samply show them.
pub fn demangle(name: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return inherent_path(format!("{d:#}"));
    }
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            if let Ok(text) = sym.demangle() {
                return text;
            }
        }
        // cpp_demangle 0.5 refuses some names GCC writes (an `sr`
        // expression in an `enable_if` return type); the C++ library's own
        // demangler, which c++filt shares, reads them.
        if let Some(text) = cxa::demangle(name) {
            return text;
        }
    }
    name.to_owned()
}

/// The C++ runtime's `__cxa_demangle`, from `libstdc++.so.6` when the
/// machine has it (looked up once; lapse does not link it).
mod cxa {
    use std::ffi::{c_char, c_int, c_void, CStr, CString};
    use std::sync::OnceLock;

    type CxaDemangle =
        unsafe extern "C" fn(*const c_char, *mut c_char, *mut usize, *mut c_int) -> *mut c_char;

    fn function() -> Option<CxaDemangle> {
        static FOUND: OnceLock<Option<usize>> = OnceLock::new();
        let address = *FOUND.get_or_init(|| {
            // SAFETY: dlopen/dlsym with NUL-terminated names; the library
            // stays loaded (never dlclosed), so the address stays valid.
            unsafe {
                let lib = libc::dlopen(
                    c"libstdc++.so.6".as_ptr(),
                    libc::RTLD_LAZY | libc::RTLD_LOCAL,
                );
                if lib.is_null() {
                    return None;
                }
                let f = libc::dlsym(lib, c"__cxa_demangle".as_ptr());
                (!f.is_null()).then_some(f as usize)
            }
        });
        // SAFETY: the address is __cxa_demangle's, whose C signature
        // CxaDemangle is.
        address.map(|a| unsafe { std::mem::transmute::<usize, CxaDemangle>(a) })
    }

    pub(super) fn demangle(name: &str) -> Option<String> {
        let f = function()?;
        let c = CString::new(name).ok()?;
        let mut status: c_int = -1;
        // SAFETY: a NUL-terminated name; no buffer of ours (it mallocs one,
        // freed below); status is written.
        let out = unsafe {
            f(
                c.as_ptr(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &mut status,
            )
        };
        if out.is_null() {
            return None;
        }
        let text = (status == 0).then(|| {
            // SAFETY: on success it returns a NUL-terminated malloc'd string.
            let c = unsafe { CStr::from_ptr(out) };
            c.to_string_lossy().into_owned()
        });
        // SAFETY: the buffer is malloc'd by __cxa_demangle and ours to free.
        unsafe { libc::free(out.cast::<c_void>()) };
        text
    }
}

/// v0 names an inherent method `<app::Counter>::bump` and legacy names it
/// `app::Counter::bump`: the brackets around a leading type that is not a
/// trait impl (`<T as Trait>::f` keeps them) go, so that both manglings give
/// one path, the one people write (and `--function` matches).
fn inherent_path(name: String) -> String {
    if !name.starts_with('<') {
        return name;
    }
    let mut depth = 0usize;
    for (i, c) in name.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => {
                depth -= 1;
                if depth == 0 {
                    let inner = &name[1..i];
                    let rest = &name[i + 1..];
                    if !rest.starts_with("::") || top_level_as(inner) {
                        return name;
                    }
                    return format!("{inner}{rest}");
                }
            }
            _ => {}
        }
    }
    name
}

/// True when `s` holds ` as ` outside any brackets.
fn top_level_as(s: &str) -> bool {
    let mut depth = 0usize;
    let b = s.as_bytes();
    for i in 0..b.len() {
        match b[i] {
            b'<' | b'(' | b'[' => depth += 1,
            b'>' | b')' | b']' => depth = depth.saturating_sub(1),
            b' ' if depth == 0 && b[i..].starts_with(b" as ") => return true,
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::{demangle, inherent_path};

    #[test]
    fn rust_legacy_without_hash() {
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
    }

    #[test]
    fn rust_v0_generics_closures_and_impls() {
        // (names rustc 1.95 wrote with -C symbol-mangling-version=v0)
        let cases = [
            ("_RINvCskIUTY6XvPpZ_2rp7generichEB2_", "rp::generic::<u8>"),
            ("_RINvCskIUTY6XvPpZ_2rp7genericReEB2_", "rp::generic::<&str>"),
            ("_RNvMCskIUTY6XvPpZ_2rpNtB2_7Counter4bump", "rp::Counter::bump"),
            (
                "_RINvNtNtCsjrHSEGnQ3l9_3std3sys9backtrace28___rust_begin_short_backtraceNCNvCskIUTY6XvPpZ_2rp4main0yEB1b_",
                "std::sys::backtrace::__rust_begin_short_backtrace::<rp::main::{closure#0}, u64>",
            ),
        ];
        for (mangled, want) in cases {
            assert_eq!(demangle(mangled), want);
        }
    }

    #[test]
    fn rust_legacy_closures_and_trait_impls() {
        assert_eq!(
            demangle("_ZN2rp4main28_$u7b$$u7b$closure$u7d$$u7d$17h0123456789abcdefE"),
            "rp::main::{{closure}}"
        );
        assert_eq!(
            demangle("_ZN36_$LT$rp..Sq$u20$as$u20$rp..Shape$GT$4area17h0123456789abcdefE"),
            "<rp::Sq as rp::Shape>::area"
        );
    }

    #[test]
    fn inherent_impls_read_as_paths_and_trait_impls_keep_their_brackets() {
        assert_eq!(
            inherent_path("<app::Counter>::bump".into()),
            "app::Counter::bump"
        );
        assert_eq!(
            inherent_path("<std::JoinInner<u64>>::join".into()),
            "std::JoinInner<u64>::join"
        );
        assert_eq!(
            inherent_path("<app::Sq as app::Shape>::area".into()),
            "<app::Sq as app::Shape>::area"
        );
        assert_eq!(
            inherent_path("<alloc::Vec<(u8, u8)> as core::Clone>::clone".into()),
            "<alloc::Vec<(u8, u8)> as core::Clone>::clone"
        );
        assert_eq!(inherent_path("<u8>".into()), "<u8>");
        assert_eq!(inherent_path("<<unbalanced".into()), "<<unbalanced");
        assert_eq!(inherent_path("app::f".into()), "app::f");
    }

    #[test]
    fn cpp_with_arguments() {
        assert_eq!(demangle("_ZN3foo3barEi"), "foo::bar(int)");
    }

    #[test]
    fn plain_c_and_garbage_unchanged() {
        assert_eq!(demangle("main"), "main");
        assert_eq!(demangle("_Z"), "_Z");
        assert_eq!(demangle("_ZZZZZ"), "_ZZZZZ");
    }

    #[test]
    fn cpp_names_with_an_sr_expression_in_enable_if_demangle() {
        // (uftrace's t255/t256: GCC's names for enable_if overloads)
        let name = "_Z5twiceIiENSt9enable_ifIXsrSt11is_integralIT_E5valueES2_E4typeES2_";
        assert_eq!(
            demangle(name),
            "std::enable_if<std::is_integral<int>::value, int>::type twice<int>(int)"
        );
    }
}
