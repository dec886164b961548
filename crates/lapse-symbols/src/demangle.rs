//! Symbol names as people read them: Rust (legacy and v0) and C++ (Itanium).

/// Demangles `name` when it is a Rust or C++ mangled name; returns it
/// unchanged otherwise. Rust hashes are dropped (`{:#}` form), as `perf` and
/// samply show them.
pub fn demangle(name: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return format!("{d:#}");
    }
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            if let Ok(text) = sym.demangle() {
                return text;
            }
        }
    }
    name.to_owned()
}

#[cfg(test)]
mod tests {
    use super::demangle;

    #[test]
    fn rust_legacy_without_hash() {
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
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
}
