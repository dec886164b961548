//! The macros, compiled and run: hooks installed in place of the runtime
//! record every probe of the calling thread, and each test checks the exact
//! events its code makes and what their site records say (read with the
//! layout documented in `site.rs`, as the recorder reads the file).

use std::cell::RefCell;
use std::fmt;
use std::sync::Once;

/// One probe: the site's name, kind, file, line, and whether it is an exit.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Probe {
    name: String,
    kind: u32,
    file: String,
    line: u32,
    exit: bool,
    site: usize,
}

thread_local! {
    static LOG: RefCell<Vec<Probe>> = const { RefCell::new(Vec::new()) };
}

/// Reads a site record from memory, checking it as the recorder does.
fn read_site(site: *const u8, exit: bool) -> Probe {
    // SAFETY: the hooks only ever get sites made by the macros: statics
    // whose header and text are all there.
    let header = unsafe { std::slice::from_raw_parts(site, lapse::__private::HEADER_LEN) };
    assert_eq!(header[..8], lapse::__private::MAGIC);
    let word = |at: usize| u32::from_ne_bytes(header[at..at + 4].try_into().unwrap());
    let (kind, line, name_len, file_len) = (word(8), word(12), word(16), word(20));
    // SAFETY: as above; the lengths are the record's own.
    let text = unsafe { std::slice::from_raw_parts(site.add(24), (name_len + file_len) as usize) };
    let (name, file) = text.split_at(name_len as usize);
    Probe {
        name: String::from_utf8(name.to_vec()).unwrap(),
        kind,
        file: String::from_utf8(file.to_vec()).unwrap(),
        line,
        exit,
        site: site as usize,
    }
}

unsafe extern "C" fn enter(site: *const u8) {
    LOG.with(|l| l.borrow_mut().push(read_site(site, false)));
}

unsafe extern "C" fn exit(site: *const u8) {
    LOG.with(|l| l.borrow_mut().push(read_site(site, true)));
}

/// The probes `f` makes on this thread.
fn probes(f: impl FnOnce()) -> Vec<Probe> {
    static INSTALL: Once = Once::new();
    // SAFETY: the hooks take any site the macros make.
    INSTALL.call_once(|| unsafe { lapse::__private::install_hooks(enter, exit) });
    LOG.with(|l| l.borrow_mut().clear());
    f();
    LOG.with(|l| std::mem::take(&mut *l.borrow_mut()))
}

/// The probes as `>name` / `<name` strings.
fn trace(f: impl FnOnce()) -> Vec<String> {
    probes(f)
        .iter()
        .map(|p| format!("{}{}", if p.exit { '<' } else { '>' }, p.name))
        .collect()
}

/// The line of the first line of this file containing `marker`.
fn line_of(marker: &str) -> u32 {
    let source = include_str!("profile.rs");
    let at = source
        .lines()
        .position(|l| l.contains(marker) && !l.contains("line_of("))
        .expect("marker in the source");
    at as u32 + 1
}

#[lapse::profile]
fn leaf(x: u64) -> u64 {
    // LEAF_BODY
    x + 1
}

#[lapse::profile]
fn outer(n: u64) -> u64 {
    (0..n).map(leaf).sum()
}

#[test]
fn a_function_is_one_call_named_by_its_path() {
    let mut out = 0;
    let p = probes(|| out = leaf(41));
    assert_eq!(out, 42, "the function still computes what it did");
    assert_eq!(p.len(), 2);
    assert_eq!(p[0].name, "profile::leaf");
    assert_eq!((p[0].exit, p[1].exit), (false, true));
    assert_eq!(p[0].site, p[1].site, "entry and exit name one site");
    assert_eq!(p[0].kind, lapse::__private::KIND_FUNCTION);
    assert!(p[0].file.ends_with("profile.rs"), "{}", p[0].file);
    assert_eq!(p[0].line, line_of("LEAF_BODY") - 1, "the line of `fn leaf`");
}

#[test]
fn nested_calls_are_nested() {
    assert_eq!(
        trace(|| assert_eq!(outer(2), 3)),
        [
            ">profile::outer",
            ">profile::leaf",
            "<profile::leaf",
            ">profile::leaf",
            "<profile::leaf",
            "<profile::outer"
        ]
    );
}

#[lapse::profile]
fn recurse(n: u32) -> u32 {
    if n == 0 {
        return 0; // (an early return closes the call too)
    }
    1 + recurse(n - 1)
}

#[test]
fn recursion_counts_every_call() {
    let p = probes(|| assert_eq!(recurse(5), 5));
    assert_eq!(p.iter().filter(|p| !p.exit).count(), 6);
    assert_eq!(p.iter().filter(|p| p.exit).count(), 6);
    assert!(p[..6].iter().all(|p| !p.exit) && p[6..].iter().all(|p| p.exit));
}

#[lapse::profile]
fn generic<T>(t: T) -> String
where
    T: fmt::Display + Clone,
{
    t.to_string()
}

#[test]
fn a_generic_function_is_one_site() {
    let p = probes(|| {
        assert_eq!(generic(7u8), "7");
        assert_eq!(generic("x"), "x");
    });
    assert_eq!(p.len(), 4);
    assert!(p.iter().all(|x| x.name == "profile::generic"));
    assert_eq!(p[0].site, p[2].site, "every instance records the one site");
}

#[lapse::profile(name = "my own name")]
fn named() {}

#[test]
fn an_explicit_name() {
    assert_eq!(trace(named), [">my own name", "<my own name"]);
}

#[derive(Debug)]
struct Counter(u64);

#[lapse::profile]
impl Counter {
    fn new() -> Counter {
        Counter(0)
    }

    pub fn bump(&mut self) -> u64 {
        self.0 += 1;
        self.0
    }

    fn into_inner(self) -> u64 {
        self.0
    }

    /// (left alone: usable in constants)
    const fn zero() -> u64 {
        0
    }

    #[lapse::profile(skip)]
    fn quiet(&self) -> u64 {
        self.0
    }

    #[lapse::profile(name = "Counter::peek (custom)")]
    fn peek(&self) -> u64 {
        self.0
    }
}

impl fmt::Display for Counter {
    #[lapse::profile]
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

#[lapse::profile]
impl PartialEq<u64> for Counter {
    fn eq(&self, other: &u64) -> bool {
        self.0 == *other
    }
}

const ZERO: u64 = Counter::zero();

#[test]
fn methods_of_an_impl_block_are_named_with_the_type() {
    let t = trace(|| {
        let mut c = Counter::new();
        c.bump();
        assert_eq!(c.quiet() + c.peek(), 2);
        assert!(c == 1);
        assert_eq!(c.to_string(), "#1");
        assert_eq!(c.into_inner() + ZERO, 1);
    });
    assert_eq!(
        t,
        [
            ">profile::Counter::new",
            "<profile::Counter::new",
            ">profile::Counter::bump",
            "<profile::Counter::bump",
            ">Counter::peek (custom)",
            "<Counter::peek (custom)",
            "><profile::Counter as PartialEq<u64>>::eq",
            "<<profile::Counter as PartialEq<u64>>::eq",
            ">profile::fmt",
            "<profile::fmt",
            ">profile::Counter::into_inner",
            "<profile::Counter::into_inner",
        ]
    );
}

struct Wrapper<T>(T);

#[lapse::profile]
impl<T: Clone + Default> Wrapper<T>
where
    T: fmt::Debug,
{
    fn get(&self) -> T {
        self.0.clone()
    }

    fn reset(&mut self) -> &mut Self {
        self.0 = T::default();
        self
    }
}

#[test]
fn generic_impl_blocks() {
    let t = trace(|| {
        let mut w = Wrapper(5u8);
        assert_eq!(w.reset().get(), 0);
        assert_eq!(Wrapper("a").get(), "a");
    });
    assert_eq!(
        t,
        [
            ">profile::Wrapper<T>::reset",
            "<profile::Wrapper<T>::reset",
            ">profile::Wrapper<T>::get",
            "<profile::Wrapper<T>::get",
            ">profile::Wrapper<T>::get",
            "<profile::Wrapper<T>::get",
        ]
    );
}

#[test]
fn scopes_last_to_the_end_of_their_block() {
    let t = trace(|| {
        let mut total = 0;
        for i in 0..2 {
            lapse::scope!("round");
            total += leaf(i);
        }
        {
            lapse::scope!("first");
            lapse::scope!(concat!("sec", "ond"));
            total += 1;
        }
        assert_eq!(total, 4);
    });
    assert_eq!(
        t,
        [
            ">round",
            ">profile::leaf",
            "<profile::leaf",
            "<round",
            ">round",
            ">profile::leaf",
            "<profile::leaf",
            "<round",
            ">first",
            ">second",
            "<second",
            "<first",
        ]
    );
}

#[test]
fn a_scope_records_its_line_and_kind() {
    let p = probes(|| {
        lapse::scope!("here"); // SCOPE_LINE
    });
    assert_eq!(p[0].kind, lapse::__private::KIND_SCOPE);
    assert_eq!(p[0].line, line_of("SCOPE_LINE"));
    assert!(p[0].file.ends_with("profile.rs"));
}

#[lapse::profile]
fn fails(i: u32) -> Result<u32, String> {
    let v: u32 = format!("{i}x").parse().map_err(|_| "bad".to_string())?;
    Ok(v)
}

#[lapse::profile]
fn panics_at(n: u32) -> u32 {
    lapse::scope!("before the panic");
    if n == 0 {
        panic!("planned");
    }
    panics_at(n - 1)
}

#[test]
fn question_marks_and_panics_close_their_calls() {
    assert_eq!(
        trace(|| assert!(fails(1).is_err())),
        [">profile::fails", "<profile::fails"]
    );
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let t = trace(|| {
        let caught = std::panic::catch_unwind(|| panics_at(1));
        assert!(caught.is_err());
        leaf(0);
    });
    std::panic::set_hook(hook);
    assert_eq!(
        t,
        [
            ">profile::panics_at",
            ">before the panic",
            ">profile::panics_at",
            ">before the panic",
            "<before the panic",
            "<profile::panics_at",
            "<before the panic",
            "<profile::panics_at",
            ">profile::leaf",
            "<profile::leaf",
        ]
    );
}

#[test]
fn each_thread_records_its_own_calls() {
    let other = std::thread::spawn(|| trace(|| assert_eq!(outer(1), 1)))
        .join()
        .unwrap();
    let here = trace(|| assert_eq!(leaf(1), 2));
    assert_eq!(other.len(), 4);
    assert_eq!(here, [">profile::leaf", "<profile::leaf"]);
}

mod inner {
    pub struct Thing;

    impl Thing {
        /// A lone method: the macro does not see the type.
        #[lapse::profile]
        pub fn lone(&self) -> u8 {
            1
        }
    }

    #[lapse::profile]
    pub unsafe fn not_safe(p: *const u8) -> u8 {
        // SAFETY: the caller's promise
        unsafe { *p }
    }

    #[lapse::profile]
    pub extern "C" fn callback(x: i32) -> i32 {
        #![allow(clippy::let_and_return)]
        let y = x * 2;
        y
    }

    #[lapse::profile]
    pub fn r#match() {}
}

#[test]
fn modules_qualifiers_and_raw_names() {
    let t = trace(|| {
        assert_eq!(inner::Thing.lone(), 1);
        // SAFETY: a valid pointer
        assert_eq!(unsafe { inner::not_safe(&7) }, 7);
        assert_eq!(inner::callback(2), 4);
        inner::r#match();
    });
    assert_eq!(
        t,
        [
            ">profile::inner::lone",
            "<profile::inner::lone",
            ">profile::inner::not_safe",
            "<profile::inner::not_safe",
            ">profile::inner::callback",
            "<profile::inner::callback",
            ">profile::inner::match",
            "<profile::inner::match",
        ]
    );
}

trait Greet {
    /// A trait's default method: a function of the trait's module.
    #[lapse::profile]
    fn greet(&self) -> &'static str {
        "hello"
    }
}

struct Greeter;
impl Greet for Greeter {}

struct Pair<const N: usize>([u8; N]);

#[lapse::profile]
impl<'a, const N: usize> IntoIterator for &'a Pair<N> {
    type Item = &'a u8;
    type IntoIter = std::slice::Iter<'a, u8>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[lapse::profile]
impl<const N: usize> Pair<N> {
    pub(crate) fn first(&self) -> Option<u8> {
        self.0.first().copied()
    }
}

#[test]
fn default_methods_reference_types_and_const_generics() {
    let t = trace(|| {
        assert_eq!(Greeter.greet(), "hello");
        let p = Pair([1, 2]);
        assert_eq!((&p).into_iter().count(), 2);
        assert_eq!(p.first(), Some(1));
    });
    assert_eq!(
        t,
        [
            ">profile::greet",
            "<profile::greet",
            "><&'a Pair<N> as IntoIterator>::into_iter",
            "<<&'a Pair<N> as IntoIterator>::into_iter",
            ">profile::Pair<N>::first",
            "<profile::Pair<N>::first",
        ]
    );
}
