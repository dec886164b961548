//! Site records of the `lapse` crate read from ELF files: a library built
//! by gcc with records laid out by hand (good and damaged ones), and this
//! test's own executable, whose records the `lapse` crate made.

use std::path::{Path, PathBuf};
use std::process::Command;

use lapse_symbols::{ElfModule, SiteKind, SiteRecord};

/// Three records in one `lapse_sites` section: a good one at 0, a bad
/// magic at 40, a name longer than the section at 72.
const HAND_MADE: &str = r#"
#include <stdint.h>
struct rec { char magic[8]; uint32_t kind, line, name_len, file_len; char text[16]; };
__attribute__((section("lapse_sites"), used, aligned(4)))
const struct rec sites[3] = {
    { "LAPSITE1", 1, 7, 9, 7, "app::spinsrc/a.r" },
    { "LAPSITEX", 1, 7, 9, 7, "app::spinsrc/a.r" },
    { "LAPSITE1", 2, 0, 9999, 0, "overflowing" },
};
int main(void) { return 0; }
"#;

/// The program and its directory (removed when the test passes).
fn build(name: &str, source: &str) -> Option<(lapse_testkit::WorkDir, PathBuf)> {
    let dir = lapse_testkit::WorkDir::new(env!("CARGO_TARGET_TMPDIR"), &format!("sites-{name}"));
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).ok()?;
    let out = dir.join(name);
    let status = Command::new("gcc")
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .ok()?;
    status.success().then_some((dir, out))
}

#[test]
fn hand_made_records_good_and_damaged() {
    let Some((_dir, exe)) = build("hand", HAND_MADE) else {
        lapse_testkit::skip::<()>("gcc not available");
        return;
    };
    let m = ElfModule::open(&exe).expect("gcc output parses");
    let range = m.sites_range().expect("the lapse_sites section");
    assert_eq!(range.end - range.start, 3 * 40);
    // (the text field is 16 bytes: "app::spin" then "src/a.r", cut to fit)
    assert_eq!(
        m.site_at(range.start),
        Some(SiteRecord {
            kind: SiteKind::Function,
            name: "app::spin".into(),
            file: Some("src/a.r".into()),
            line: Some(7),
        })
    );
    assert_eq!(m.site_at(range.start + 4), None, "not a record's start");
    assert_eq!(m.site_at(range.start + 40), None, "bad magic");
    assert_eq!(
        m.site_at(range.start + 80),
        None,
        "a name past the section's end"
    );
    assert_eq!(m.site_at(range.end), None);
    assert_eq!(m.site_at(range.start - 8), None);
    // a module without the section has no sites
    let (_plain_dir, plain) = build("plain", "int main(void) { return 0; }").expect("gcc works");
    let plain = ElfModule::open(&plain).expect("parses");
    assert_eq!((plain.sites_range(), plain.site_at(0x1000)), (None, None));
}

/// The module-relative address of `addr`, an address in this executable.
fn module_relative(m: &ElfModule, exe: &Path, addr: usize) -> u64 {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    let exe = exe.to_string_lossy();
    let (start, offset) = maps
        .lines()
        .filter(|l| l.ends_with(&*exe) && l.split_whitespace().nth(1) == Some("r-xp"))
        .find_map(|l| {
            let mut f = l.split_whitespace();
            let start = f.next()?.split('-').next()?;
            let offset = f.nth(1)?;
            Some((
                u64::from_str_radix(start, 16).ok()?,
                u64::from_str_radix(offset, 16).ok()?,
            ))
        })
        .expect("this executable's code mapping");
    addr as u64 - m.bias(start, offset)
}

static SEEN: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());

unsafe extern "C" fn seen(site: *const u8) {
    SEEN.lock().unwrap().push(site as usize);
}

#[lapse::profile]
fn profiled() -> u32 {
    lapse::scope!("a scope in the test"); // SCOPE_HERE
    7
}

#[test]
fn records_the_lapse_crate_made_in_this_executable() {
    // SAFETY: the hook takes any site.
    unsafe { lapse::__private::install_hooks(seen, seen) };
    assert_eq!(profiled(), 7);
    let sites = SEEN.lock().unwrap().clone();
    assert_eq!(
        sites.len(),
        4,
        "enter and exit of the function and the scope"
    );
    let exe = std::fs::canonicalize("/proc/self/exe").expect("this executable");
    let m = ElfModule::open(&exe).expect("this executable parses");
    let range = m.sites_range().expect("a lapse_sites section");
    let function = m
        .site_at(module_relative(&m, &exe, sites[0]))
        .expect("the function's record");
    let scope = m
        .site_at(module_relative(&m, &exe, sites[1]))
        .expect("the scope's record");
    assert!(range.contains(&module_relative(&m, &exe, sites[1])));
    assert_eq!(function.name, "sites::profiled");
    assert_eq!(function.kind, SiteKind::Function);
    assert_eq!(scope.name, "a scope in the test");
    assert_eq!(scope.kind, SiteKind::Scope);
    let line = include_str!("sites.rs")
        .lines()
        .position(|l| l.contains("// SCOPE_HERE"))
        .map(|i| i as u32 + 1);
    assert_eq!(scope.line, line);
    assert_eq!(function.line, line.map(|l| l - 1), "the `fn` line");
    assert!(scope.file.is_some_and(|f| f.ends_with("sites.rs")));
}
