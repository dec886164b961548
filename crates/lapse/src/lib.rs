//! Probes for Rust programs recorded by the `lapse` profiler: `#[lapse::profile]` on
//! functions, methods and impl blocks, `lapse::scope!("name")` for blocks.
//!
//! ```
//! #[lapse::profile]
//! fn parse(input: &str) -> usize {
//!     input.split(',').count()
//! }
//!
//! struct Counter(u64);
//!
//! #[lapse::profile] // every method with a body: `my_app::Counter::bump`, ...
//! impl Counter {
//!     fn bump(&mut self) -> u64 {
//!         self.0 += 1;
//!         self.0
//!     }
//! }
//!
//! #[lapse::profile(name = "checksum")] // a name of your own
//! fn sum(v: &[u64]) -> u64 {
//!     v.iter().sum()
//! }
//!
//! fn main() {
//!     let mut c = Counter(0);
//!     for _ in 0..3 {
//!         lapse::scope!("one round"); // until the end of the loop's block
//!         c.bump();
//!     }
//!     assert_eq!(parse("a,b") + sum(&[1, 2]) as usize, 5);
//! }
//! ```
//!
//! Run it as usual: the probes do nothing (each is one load and one
//! branch). Run it under `lapse record -- ./target/release/my_app`: each
//! profiled function and each scope is a function of the program's module
//! in every view and export, with its calls and its four time values
//! (`lapse record --method auto` sees the probes and records by
//! instrumentation).
//!
//! # What is recorded
//!
//! - A profiled function's call is one call of a function named by its
//!   path: `module_path!()` and the function's name (`my_app::net::send`).
//!   On an `impl` block the macro sees the type, and methods are named
//!   `my_app::Counter::bump`, or `<my_app::Counter as Display>::fmt` in a
//!   trait impl, with the type and trait as written in the `impl` line
//!   (generic arguments included: `Wrapper<T>`). On a lone method the
//!   macro sees only the method (no `syn`, no type information): it is
//!   `my_app::bump` unless the impl block carries the attribute or the
//!   method has `#[lapse::profile(name = "...")]`.
//! - A scope is one call of a function named by its string, from the
//!   `scope!` line to the end of the enclosing block.
//! - The exit is the drop of a guard, so a `return`, a `?` or a panic
//!   unwinding through the frame closes the call where it happens: frames
//!   stay balanced through `catch_unwind`.
//! - Every site carries its `file!()` and `line!()`: the reports' source
//!   file and line of the function (a profiled function's line is its
//!   `fn` line).
//!
//! On an impl block, `const fn` and `async fn` methods are left alone, as
//! is a method marked `#[lapse::profile(skip)]`. On a single function,
//! `const fn` and `async fn` are compile errors (a probe cannot run in
//! constant evaluation; an `async fn`'s time between polls is not a call).
//!
//! # How it works
//!
//! Each site is a `static` [`__private::Site`] record in the ELF section
//! `lapse_sites`, holding its name, file and line inline (no pointers, so
//! its bytes in the file are its bytes in memory). Its address is what the
//! site's events carry. At start-up the crate looks up the lapse runtime
//! (`lapse_scope_enter`/`lapse_scope_exit`, via `dlsym`) once; without it
//! every probe stays a load and a branch. The recorder names each address
//! found in a module's `lapse_sites` section from the record in the file.
//!
//! # Pausing and marking
//!
//! [`pause()`] and [`resume()`] stop and restart the recording on every
//! thread (with `lapse record --start-paused`, nothing is recorded until the
//! first `resume`); [`mark()`] records an instant with a text, listed by
//! `lapse report --view marks` and usable as `--from-mark`/`--to-mark`.
//! Without lapse they do nothing.
//!
//! This crate has no dependency outside this repository (its proc-macro
//! crate, `lapse-macros`, parses tokens by hand), so a program can use it
//! by path, offline.

mod control;
mod probe;
mod site;

pub use control::{mark, pause, resume};
pub use lapse_macros::profile;
pub use probe::runtime_loaded;

/// Records the rest of the enclosing block as one call of a function named
/// `name` (a `&'static str` constant: a literal, `concat!(...)`, a `const`).
///
/// ```
/// fn work(items: &[u32]) -> u32 {
///     let total = {
///         lapse::scope!("sum");
///         items.iter().sum::<u32>()
///     };
///     lapse::scope!("check"); // to the end of `work`
///     total * 2
/// }
/// assert_eq!(work(&[1, 2]), 6);
/// ```
#[macro_export]
macro_rules! scope {
    ($name:expr $(,)?) => {
        let _lapse_scope_guard = {
            const NAME: &str = $name;
            const FILE: &str = ::core::file!();
            #[cfg_attr(target_os = "linux", unsafe(link_section = "lapse_sites"))]
            #[used]
            static SITE: $crate::__private::Site<{ NAME.len() + FILE.len() }> =
                $crate::__private::Site::new(
                    $crate::__private::KIND_SCOPE,
                    ::core::line!(),
                    NAME,
                    FILE,
                );
            $crate::__private::Guard::enter(&SITE)
        };
    };
}

/// What the macros expand to; not an API (it changes without notice).
#[doc(hidden)]
pub mod __private {
    pub use crate::probe::{install_hooks, Guard, Hook};
    pub use crate::site::{Site, HEADER_LEN, KIND_FUNCTION, KIND_SCOPE, MAGIC, SECTION};
}
