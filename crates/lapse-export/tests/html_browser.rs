//! The HTML page in a real browser: `tests/browser/drive.js` (Playwright's
//! `playwright-core` driving Debian's `/usr/bin/chromium`) picks a thread,
//! searches, sorts, expands, switches elapsed/application, opens every view
//! and zooms the timeline, and fails on any script or console error or any
//! request besides the page itself. Screenshots are kept under the test
//! target's tmp dir (`html-browser/<case>/*.png`) for a person to look at;
//! their paths are printed.
//!
//! Skips where node, Chromium or playwright-core are missing (`.ci/install`
//! installs them: `npm ci` in `tests/browser`); `LAPSE_E2E=require` turns
//! a skip into a failure.

mod common;
mod html_recording;

use std::path::{Path, PathBuf};
use std::process::Command;

use lapse_data::DataFile;
use lapse_export::Format;
use serde_json::Value;

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

/// node, with Chromium and playwright-core where drive.js looks for them.
fn node() -> Option<PathBuf> {
    let node = lapse_testkit::tool("node")?;
    let chromium = std::env::var_os("CHROMIUM")
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    if !chromium.exists() {
        return lapse_testkit::skip(format!("{} is not installed", chromium.display()));
    }
    if !browser_dir().join("node_modules/playwright-core").is_dir() {
        return lapse_testkit::skip(format!(
            "playwright-core is not installed (run `npm ci` in {})",
            browser_dir().display()
        ));
    }
    Some(node)
}

/// Exports `file` as a page, has drive.js check it, and returns its report.
fn drive(file: &DataFile, case: &str, flags: &[&str]) -> Option<Value> {
    let node = node()?;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("html-browser")
        .join(case);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("page.html");
    std::fs::write(&page, common::export(file, Format::Html)).unwrap();
    let out = Command::new(node)
        .current_dir(browser_dir())
        .arg("drive.js")
        .arg("check")
        .arg(&page)
        .arg(&dir)
        .args(flags)
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "drive.js printed no report ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(
        out.status.success() && report.get("failed").is_none(),
        "{case}: {}",
        report["failed"].as_str().unwrap_or(&stdout)
    );
    assert_eq!(
        report["errors"],
        Value::Array(vec![]),
        "{case}: script errors"
    );
    assert_eq!(
        report["console"],
        Value::Array(vec![]),
        "{case}: console errors"
    );
    assert_eq!(
        report["requests"],
        Value::Array(vec![]),
        "{case}: network requests"
    );
    for c in report["checks"].as_array().unwrap() {
        eprintln!("{case}: {}", c.as_str().unwrap_or_default());
    }
    for s in report["screenshots"].as_array().unwrap() {
        let path = s.as_str().unwrap();
        assert!(
            std::fs::metadata(path).is_ok_and(|m| m.len() > 1000),
            "{path}"
        );
        println!("screenshot: {path}");
    }
    Some(report)
}

#[test]
fn a_person_can_use_the_instrumentation_page() {
    let file = html_recording::program(60);
    let Some(report) = drive(
        &file,
        "instrumentation",
        &["--off-cpu", "--query", "</script>"],
    ) else {
        return;
    };
    let checks = report["checks"].to_string();
    assert!(
        checks.contains("search \\\"</script>\\\": 1 of"),
        "{checks}"
    );
}

#[test]
fn probe_dominated_functions_are_marked_in_the_page() {
    // A probe cost of 3 µs: main and work are mostly probe, helper is not
    // (html.rs checks the same rows against the report's probe_dominated).
    drive(
        &common::instr_file_costing(3_000.0),
        "dominated",
        &["--dominated", "main,work"],
    );
}

#[test]
fn a_person_can_use_the_sampling_page() {
    drive(&common::sample_file(), "sampling", &["--sampling"]);
}

#[test]
fn the_page_of_a_20000_deep_recursion_opens_all_the_way_down() {
    drive(
        &html_recording::deep_recursion(20_000),
        "deep",
        &["--deep", "20001"],
    );
}

#[test]
fn a_sampling_timeline_is_drawn_where_the_thread_ran_at_any_depth() {
    // 400 samples 1 ms apart, 20 frames of interpreter above the work: the
    // timeline was blank (a sample's bucket held it, its neighbours
    // nothing) and cut at 12 levels.
    let file = html_recording::sampled_deep(400, 20);
    let Some(report) = drive(&file, "sampled-deep", &["--sampling", "--sampled-timeline"]) else {
        return;
    };
    let checks = report["checks"].to_string();
    assert!(checks.contains("sampled timeline"), "{checks}");
}

#[test]
fn off_cpu_periods_show_and_select_the_stack_the_thread_waited_in() {
    // (#34 item 2) The sampled run above recorded with --off-cpu: blocked
    // in eval > read_socket, then preempted in parse, where it was idle.
    let file = html_recording::sampled_off_cpu(400, 20);
    let Some(report) = drive(&file, "off-cpu", &["--sampling", "--off-cpu-timeline"]) else {
        return;
    };
    let checks = report["checks"].to_string();
    assert!(checks.contains("clicking selected read_socket"), "{checks}");
}
