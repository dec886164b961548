//! The HTML page: its embedded data must be the report's, and headless
//! Chromium must render it — table rows, tree nodes, flame graph — with no
//! script error. The browser part skips with a message where Chromium is
//! missing (`.ci/run` installs it and makes that a failure).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lapse_export::Format;
use serde_json::Value;

fn embedded(page: &str) -> Value {
    let open = r#"<script type="application/json" id="lapse-data">"#;
    let start = page.find(open).expect("data element") + open.len();
    let len = page[start..].find("</script>").expect("end of data");
    serde_json::from_str(&page[start..start + len]).expect("JSON data")
}

fn count_nodes(nodes: &Value) -> usize {
    nodes
        .as_array()
        .unwrap()
        .iter()
        .map(|n| 1 + count_nodes(&n["children"]))
        .sum()
}

#[test]
fn page_embeds_the_report_and_needs_no_network() {
    let file = common::instr_file();
    let page = String::from_utf8(common::export(&file, Format::Html)).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    for remote in ["http://", "https://", "src=\"//"] {
        assert!(!page.contains(remote), "page refers to {remote}");
    }
    let data = embedded(&page);
    assert_eq!(data["method"], "instrumentation");
    assert_eq!(data["functions"].as_array().unwrap().len(), 3);
    assert_eq!(data["session"]["elapsed_inclusive_ns"], 150_000);
    // Roots: main (thread 1) and helper and work (thread 2).
    assert_eq!(count_nodes(&data["roots"]), 6);
    assert_eq!(data["hot_path"][0], "main");
}

/// Debian's Chromium (`.ci/run` installs it), or a skip.
fn chromium() -> Option<PathBuf> {
    lapse_testkit::tool("chromium")
}

/// The DOM after the page's scripts ran, as headless Chromium dumps it.
fn render(browser: &Path, page: &[u8], name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("lapse-html-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("page.html");
    std::fs::write(&path, page).unwrap();
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--virtual-time-budget=5000",
            &format!("--user-data-dir={}", dir.join("profile").display()),
            "--dump-dom",
        ])
        .arg(format!("file://{}", path.display()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start chromium");
    // Chromium should finish in seconds; never hang the test suite.
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("headless chromium did not finish in 90 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().expect("chromium output");
    let _ = std::fs::remove_dir_all(&dir);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn check_rendered(file: &lapse_data::DataFile, name: &str, first: &str) {
    let Some(browser) = chromium() else {
        return;
    };
    let page = common::export(file, Format::Html);
    let data = embedded(&String::from_utf8_lossy(&page));
    let dom = render(&browser, &page, name);
    assert!(dom.contains("<body"), "no DOM dumped: {dom:.300}");
    // window.onerror adds this element and attribute (the CSS and JS name it too).
    assert!(
        !dom.contains(r#"<div id="script-error""#) && !dom.contains("data-error="),
        "script error: {dom}"
    );
    assert!(
        dom.contains(r#"data-rendered="yes""#),
        "page did not finish rendering"
    );
    let rows = dom.matches(r#"class="fn-row""#).count();
    assert_eq!(rows, data["functions"].as_array().unwrap().len());
    assert_eq!(
        dom.matches(r#"class="tree-node""#).count(),
        count_nodes(&data["roots"])
    );
    assert!(dom.matches(r#"class="flame-node""#).count() > 1);
    // The default order is the heaviest exclusive value first.
    let first_row = dom.find(r#"class="fn-row""#).unwrap();
    assert!(
        dom[first_row..].starts_with(&format!(r#"class="fn-row"><td class="text">{first}<"#)),
        "{}",
        &dom[first_row..first_row + 120]
    );
}

#[test]
fn chromium_renders_the_instrumentation_page() {
    check_rendered(&common::instr_file(), "instr", "helper");
}

#[test]
fn chromium_renders_the_sampling_page() {
    check_rendered(&common::sample_file(), "sample", "hot");
}
