//! The importer's rules on traces small enough to check by hand.

use lapse_data::{Event, EventKind};
use lapse_import::{import, ImportError, Imported};

fn events(imp: &Imported, tid: u32) -> Vec<(u64, &'static str, String)> {
    let (_, evs) = imp
        .events
        .iter()
        .find(|(k, _)| k.tid == tid)
        .expect("thread imported");
    evs.iter()
        .map(|e: &Event| {
            let kind = match e.kind {
                EventKind::Enter => "enter",
                EventKind::Exit => "exit",
                EventKind::Unwind => "unwind",
            };
            (
                e.ts.as_nanos() / 1000,
                kind,
                imp.functions[e.function.0 as usize].name.clone(),
            )
        })
        .collect()
}

#[test]
fn zero_length_complete_events_contain_nothing() {
    // Three zero-length X at one timestamp, then one of 5 µs: each closes at
    // its own end; none becomes the parent of the next.
    let trace = r#"[
        {"ph":"X","name":"a","pid":1,"tid":1,"ts":10,"dur":0},
        {"ph":"X","name":"b","pid":1,"tid":1,"ts":10,"dur":0},
        {"ph":"X","name":"c","pid":1,"tid":1,"ts":10,"dur":0},
        {"ph":"X","name":"d","pid":1,"tid":1,"ts":10,"dur":5}
    ]"#;
    let imp = import(trace.as_bytes(), "t.json").unwrap();
    let got = events(&imp, 1);
    let want: Vec<(u64, &str, String)> = [
        (10, "enter", "a"),
        (10, "exit", "a"),
        (10, "enter", "b"),
        (10, "exit", "b"),
        (10, "enter", "c"),
        (10, "exit", "c"),
        (10, "enter", "d"),
        (15, "exit", "d"),
    ]
    .into_iter()
    .map(|(t, k, n)| (t, k, n.to_owned()))
    .collect();
    assert_eq!(got, want);
    assert_eq!(imp.unmatched_ends, 0);
}

#[test]
fn a_named_end_closes_its_event_whatever_the_category_and_the_frames_it_skips() {
    // `E` events carry no category: they must still close the `B` of that
    // name; `lookup`, left open, is closed with `parse`.
    let trace = r#"{"traceEvents":[
        {"ph":"B","name":"parse","cat":"server","pid":1,"tid":1,"ts":0},
        {"ph":"B","name":"lookup","cat":"server","pid":1,"tid":1,"ts":2},
        {"ph":"E","name":"parse","pid":1,"tid":1,"ts":7},
        {"ph":"E","name":"nothing","pid":1,"tid":1,"ts":8},
        {"ph":"E","pid":1,"tid":1,"ts":9}
    ]}"#;
    let imp = import(trace.as_bytes(), "t.json").unwrap();
    let got = events(&imp, 1);
    assert_eq!(
        got,
        [
            (0, "enter", "parse".to_owned()),
            (2, "enter", "lookup".to_owned()),
            (7, "exit", "lookup".to_owned()),
            (7, "exit", "parse".to_owned()),
        ]
    );
    assert_eq!(
        imp.unmatched_ends, 2,
        "E nothing, and the unnamed E of nothing"
    );
    assert_eq!(imp.functions.len(), 2, "an E makes no function");
}

#[test]
fn nested_complete_events_at_one_timestamp_end_inner_first() {
    let trace = r#"[
        {"ph":"X","name":"outer","pid":1,"tid":1,"ts":0,"dur":10},
        {"ph":"X","name":"inner","pid":1,"tid":1,"ts":4,"dur":6},
        {"ph":"X","name":"next","pid":1,"tid":1,"ts":10,"dur":2}
    ]"#;
    let imp = import(trace.as_bytes(), "t.json").unwrap();
    let names: Vec<String> = events(&imp, 1)
        .into_iter()
        .map(|(t, k, n)| format!("{t} {k} {n}"))
        .collect();
    assert_eq!(
        names,
        [
            "0 enter outer",
            "4 enter inner",
            "10 exit inner",
            "10 exit outer",
            "10 enter next",
            "12 exit next"
        ]
    );
}

#[test]
fn many_single_event_threads_make_one_process_each() {
    let mut trace = String::from("[");
    for i in 0..5000 {
        if i > 0 {
            trace.push(',');
        }
        trace.push_str(&format!(
            r#"{{"ph":"X","name":"f","pid":{},"tid":{i},"ts":{i},"dur":1}}"#,
            i / 2
        ));
    }
    trace.push(']');
    let imp = import(trace.as_bytes(), "t.json").unwrap();
    assert_eq!(imp.threads.len(), 5000);
    assert_eq!(imp.processes.len(), 2500);
    let p = &imp.processes[7];
    assert_eq!(
        (
            p.pid,
            p.start.map(|t| t.as_nanos()),
            p.end.map(|t| t.as_nanos())
        ),
        (7, Some(14_000), Some(16_000))
    );
}

#[test]
fn bad_documents_say_what_is_wrong() {
    let err = |t: &str| import(t.as_bytes(), "t.json").unwrap_err();
    assert!(matches!(err("{\"other\": 1}"), ImportError::Shape { .. }));
    assert!(matches!(err("42"), ImportError::Shape { .. }));
    assert!(matches!(err(r#"[{"ph": "B""#), ImportError::Json { .. }));
    match err(r#"[{"ph":"B","name":"a","ts":1}, 7]"#) {
        ImportError::Event { index, what, .. } => {
            assert_eq!((index, what.as_str()), (1, "not a JSON object"))
        }
        e => panic!("{e}"),
    }
    match err(r#"[{"ph":"X","name":"a","ts":1}]"#) {
        ImportError::Event { what, .. } => assert!(what.contains("dur"), "{what}"),
        e => panic!("{e}"),
    }
    // Deep nesting inside an event's arguments is skipped, without recursion.
    let deep = format!(
        r#"[{{"ph":"B","name":"a","ts":1,"args":{}1{}}}]"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    assert!(import(deep.as_bytes(), "t.json").is_ok());
}
