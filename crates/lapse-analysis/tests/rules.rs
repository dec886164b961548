//! One test per rule of SPEC section 2.1/2.3/2.4, on event streams small
//! enough to check by hand. Times are nanoseconds; every expected value is
//! worked out in the comment above it.

use lapse_analysis::instrument::{Accumulator, ApplicationRule, Config, ThreadRun};
use lapse_analysis::tree::FrameKey;
use lapse_analysis::values::{FunctionStats, SessionTotals, ThreadStats, TimeValue, TimeValues};
use lapse_analysis::Fine;
use lapse_data::{
    Event, EventKind, FunctionId, ModuleId, OsEvent, OsEventKind, Paused, ThreadKey, Timestamp,
};

const F: u32 = 0;
const G: u32 = 1;
const H: u32 = 2;

fn t(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

fn enter(ts: u64, f: u32) -> Event {
    Event {
        ts: t(ts),
        kind: EventKind::Enter,
        function: FunctionId(f),
    }
}

fn exit(ts: u64, f: u32) -> Event {
    Event {
        ts: t(ts),
        kind: EventKind::Exit,
        function: FunctionId(f),
    }
}

fn off(from: u64, to: u64) -> OsEvent {
    OsEvent {
        from: t(from),
        to: t(to),
        kind: OsEventKind::Switch,
    }
}

/// A thread of pid 1: (tid, start, end, events, off-CPU periods).
#[derive(Clone)]
struct Thread {
    pid: u32,
    tid: u32,
    start: Option<u64>,
    end: Option<u64>,
    events: Vec<Event>,
    off: Vec<OsEvent>,
    /// Leading enters that are inherited frames (a fork child's).
    inherited: u32,
    /// The session's paused stretches.
    paused: Vec<Paused>,
}

fn thread(events: Vec<Event>) -> Thread {
    Thread {
        pid: 1,
        tid: 1,
        start: None,
        end: None,
        events,
        off: vec![],
        inherited: 0,
        paused: vec![],
    }
}

/// Three functions F, G, H; F and H in module 0, G in module 1.
const MODULE_OF: [ModuleId; 3] = [ModuleId(0), ModuleId(1), ModuleId(0)];

fn run(threads: &[Thread], config: Config) -> Accumulator {
    let mut acc = Accumulator::new(&MODULE_OF, 2);
    for th in threads {
        let mut r = ThreadRun::new(
            &mut acc,
            &MODULE_OF,
            config,
            ThreadKey::new(th.pid, th.tid),
            th.start.map(t),
            &th.off,
        )
        .inherited(th.inherited)
        .paused(&th.paused);
        r.feed(&th.events);
        r.finish(th.end.map(t));
    }
    acc.finish(&MODULE_OF);
    acc
}

/// The default: the exact application rule.
fn plain() -> Config {
    Config::default()
}

/// The Visual Studio rule: an interval with an OS event is no application time.
fn interval_rule() -> Config {
    Config {
        application: ApplicationRule::Interval,
        ..Config::default()
    }
}

fn ns(v: Fine) -> u64 {
    v.to_nanos()
}

/// (elapsed incl, elapsed excl, application incl, application excl)
fn four(t: &TimeValues) -> (u64, u64, u64, u64) {
    (
        ns(t[TimeValue::ElapsedInclusive]),
        ns(t[TimeValue::ElapsedExclusive]),
        ns(t[TimeValue::ApplicationInclusive]),
        ns(t[TimeValue::ApplicationExclusive]),
    )
}

fn times(s: &FunctionStats) -> (u64, u64, u64, u64) {
    four(&s.time)
}

fn thread_times(s: &ThreadStats) -> (u64, u64, u64, u64) {
    four(&s.time)
}

/// (min, max, sum) over calls of value `k`.
fn per_call(s: &FunctionStats, k: TimeValue) -> (u64, u64, u64) {
    (
        ns(s.per_call.min[k]),
        ns(s.per_call.max[k]),
        ns(s.per_call.sum[k]),
    )
}

/// The four percentages of SPEC 2.4 of `t`.
fn pcts(s: &SessionTotals, t: &TimeValues) -> [f64; 4] {
    TimeValue::ALL.map(|k| s.time_pct(t, k))
}

#[test]
fn recursion_is_counted_once_per_interval() {
    // F@0 → F@10 → exit F@30 → exit F@40. Intervals: [0,10] {F}, [10,30] {F,F}, [30,40] {F}.
    // Inclusive counts F once per interval: 10+20+10 = 40 (not 60); exclusive: 40.
    let acc = run(
        &[thread(vec![
            enter(0, F),
            enter(10, F),
            exit(30, F),
            exit(40, F),
        ])],
        plain(),
    );
    let f = &acc.functions[F as usize];
    assert_eq!(times(f), (40, 40, 40, 40));
    assert_eq!(f.calls, 2);
    // Per call: outer spans 40, inner 20 (inclusive). Exclusive is per frame:
    // the outer frame is on top in [0,10] and [30,40] (20), the inner in
    // [10,30] (20): min 20, max 20, and they add up to F's exclusive 40.
    assert_eq!(per_call(f, TimeValue::ElapsedInclusive), (20, 40, 60));
    assert_eq!(per_call(f, TimeValue::ElapsedExclusive), (20, 20, 40));
    // Thread total equals F's inclusive: inclusive never exceeds the thread's time.
    assert_eq!(thread_times(&acc.threads[0]).0, 40);
}

#[test]
fn os_event_inside_an_interval_removes_just_its_time_from_application_time() {
    // F@0 → G@10 → exit G@30 → exit F@40; the thread is off the CPU during
    // [15,25], which lies inside interval [10,30] (stack F,G).
    let mut th = thread(vec![enter(0, F), enter(10, G), exit(30, G), exit(40, F)]);
    th.off = vec![off(15, 25)];
    let acc = run(&[th], plain());
    // G: elapsed 20 incl/excl; application 20 - 10 off-CPU = 10.
    assert_eq!(times(&acc.functions[G as usize]), (20, 20, 10, 10));
    // F: elapsed incl 40, excl [0,10]+[30,40] = 20; application incl 40-10 = 30, excl 20.
    assert_eq!(times(&acc.functions[F as usize]), (40, 20, 30, 20));
    assert_eq!(thread_times(&acc.threads[0]), (40, 0, 30, 0));
}

#[test]
fn interval_rule_drops_the_whole_interval_with_an_os_event() {
    // The same thread under `--application interval`: [10,30] has the OS
    // event, so none of it is application time.
    let mut th = thread(vec![enter(0, F), enter(10, G), exit(30, G), exit(40, F)]);
    th.off = vec![off(15, 25)];
    let acc = run(&[th], interval_rule());
    assert_eq!(times(&acc.functions[G as usize]), (20, 20, 0, 0));
    assert_eq!(times(&acc.functions[F as usize]), (40, 20, 20, 20));
    assert_eq!(thread_times(&acc.threads[0]), (40, 0, 20, 0));
}

#[test]
fn off_cpu_period_spanning_a_probe_is_split_between_the_intervals() {
    // F@0 → G@10 → exit G@20 → exit F@30; off CPU [5,15] straddles the probe at 10.
    let mut th = thread(vec![enter(0, F), enter(10, G), exit(20, G), exit(30, F)]);
    th.off = vec![off(5, 15)];
    // Exact: [0,10] loses 5, [10,20] loses 5, [20,30] nothing.
    let acc = run(&[th], plain());
    assert_eq!(times(&acc.functions[F as usize]), (30, 20, 20, 15));
    assert_eq!(times(&acc.functions[G as usize]), (10, 10, 5, 5));
    // Interval rule: [0,10] and [10,20] have the OS event, [20,30] not.
    let mut th = thread(vec![enter(0, F), enter(10, G), exit(20, G), exit(30, F)]);
    th.off = vec![off(5, 15)];
    let acc = run(&[th], interval_rule());
    assert_eq!(times(&acc.functions[F as usize]), (30, 20, 10, 10));
    assert_eq!(times(&acc.functions[G as usize]), (10, 10, 0, 0));
}

#[test]
fn off_cpu_period_touching_an_interval_end_takes_nothing_from_it() {
    // F@0 → G@10 → exit G@20 → exit F@30; off CPU [20,25] starts at G's exit.
    let mut th = thread(vec![enter(0, F), enter(10, G), exit(20, G), exit(30, F)]);
    th.off = vec![off(20, 25)];
    for config in [plain(), interval_rule()] {
        let acc = run(&[th.clone()], config);
        // G's interval [10,20] only touches the period: all application time.
        assert_eq!(times(&acc.functions[G as usize]), (10, 10, 10, 10));
        let f = times(&acc.functions[F as usize]);
        match config.application {
            // [20,30] loses its 5 ns off the CPU.
            ApplicationRule::Exact => assert_eq!(f, (30, 20, 25, 15)),
            // [20,30] has the OS event: all of it.
            ApplicationRule::Interval => assert_eq!(f, (30, 20, 20, 10)),
        }
    }
}

#[test]
fn system_call_periods_and_switches_inside_them_count_once() {
    // F@0 → exit F@100. A system call [20,60] (an OS event with --os-events
    // syscall), and inside it the thread is switched out [30,50]: the union
    // is 40 ns, not 60.
    let mut th = thread(vec![enter(0, F), exit(100, F)]);
    th.off = vec![
        OsEvent {
            from: t(20),
            to: t(60),
            kind: OsEventKind::Syscall,
        },
        off(30, 50),
    ];
    let acc = run(&[th], plain());
    assert_eq!(times(&acc.functions[F as usize]), (100, 100, 60, 60));
    // An instant OS event (a major fault) takes nothing away by itself.
    let mut th = thread(vec![enter(0, F), exit(100, F)]);
    th.off = vec![OsEvent {
        from: t(40),
        to: t(40),
        kind: OsEventKind::Fault,
    }];
    let acc = run(&[th.clone()], plain());
    assert_eq!(times(&acc.functions[F as usize]), (100, 100, 100, 100));
    // ... but under the interval rule it marks its interval.
    let acc = run(&[th], interval_rule());
    assert_eq!(times(&acc.functions[F as usize]), (100, 100, 0, 0));
}

#[test]
fn empty_stack_time_belongs_to_the_thread_only() {
    // Thread runs [0,50]; F runs [10,30]. Empty-stack intervals [0,10] and [30,50].
    let mut th = thread(vec![enter(10, F), exit(30, F)]);
    th.start = Some(0);
    th.end = Some(50);
    let acc = run(&[th], plain());
    assert_eq!(times(&acc.functions[F as usize]), (20, 20, 20, 20));
    // Thread inclusive = all 50; thread exclusive = the 30 ns of empty stack.
    assert_eq!(thread_times(&acc.threads[0]), (50, 30, 50, 30));
    let session = SessionTotals::of_threads(&acc.threads);
    assert_eq!(ns(session.elapsed_inclusive), 50);
    // F's exclusive share 20/50 = 40 %, empty stack 60 %: together 100 %.
    let p = pcts(&session, &acc.functions[F as usize].time);
    assert_eq!(p[1], 40.0);
    assert_eq!(p[1] + pcts(&session, &acc.threads[0].time)[1], 100.0);
}

#[test]
fn thread_that_calls_nothing_still_counts() {
    let mut th = thread(vec![]);
    th.start = Some(100);
    th.end = Some(400);
    let acc = run(&[th], plain());
    assert_eq!(thread_times(&acc.threads[0]), (300, 300, 300, 300));
}

#[test]
fn two_threads_add_up_in_the_session() {
    // Thread 1: F [0,100]. Thread 2: G [0,60], off CPU [10,30].
    let a = thread(vec![enter(0, F), exit(100, F)]);
    let mut b = thread(vec![enter(0, G), exit(60, G)]);
    b.tid = 2;
    b.off = vec![off(10, 30)];
    let acc = run(&[a, b], plain());
    let session = SessionTotals::of_threads(&acc.threads);
    // Elapsed: 100 + 60; application: 100 + (60 - 20 off the CPU) = 140.
    assert_eq!(ns(session.elapsed_inclusive), 160);
    assert_eq!(ns(session.application_inclusive), 140);
    let p = pcts(&session, &acc.functions[F as usize].time);
    // F: 100/160 elapsed = 62.5 %, 100/140 application.
    assert_eq!(p[..2], [62.5, 62.5]);
    assert!((p[2] - 100.0 * 100.0 / 140.0).abs() < 1e-9);
    let p = pcts(&session, &acc.functions[G as usize].time);
    assert_eq!(p[..2], [37.5, 37.5]);
    assert!((p[2] - 100.0 * 40.0 / 140.0).abs() < 1e-9);
}

#[test]
fn two_processes_each_get_their_threads() {
    let a = thread(vec![enter(0, F), exit(10, F)]);
    let mut b = thread(vec![enter(0, F), exit(30, F)]);
    b.pid = 2;
    b.tid = 2;
    let acc = run(&[a, b], plain());
    let by_pid = |pid| {
        acc.threads
            .iter()
            .filter(|t| t.pid == pid)
            .map(|t| ns(t.time[TimeValue::ElapsedInclusive]))
            .sum::<u64>()
    };
    assert_eq!((by_pid(1), by_pid(2)), (10, 30));
    // The function row sums over processes: 10 + 30.
    assert_eq!(times(&acc.functions[F as usize]).0, 40);
    assert_eq!(acc.functions[F as usize].calls, 2);
}

#[test]
fn module_is_counted_once_when_any_of_its_frames_is_on_the_stack() {
    // F(mod 0)@0 → G(mod 1)@10 → H(mod 0)@20 → exit H@30 → exit G@40 → exit F@50.
    let acc = run(
        &[thread(vec![
            enter(0, F),
            enter(10, G),
            enter(20, H),
            exit(30, H),
            exit(40, G),
            exit(50, F),
        ])],
        plain(),
    );
    let m0 = &acc.modules[0].time;
    let m1 = &acc.modules[1].time;
    // Module 0 is on the stack in every interval: inclusive 50 (not 50 + 10 for H).
    assert_eq!(ns(m0[TimeValue::ElapsedInclusive]), 50);
    // Module 0 exclusive: top in module 0 during [0,10], [20,30], [40,50] = 30.
    assert_eq!(ns(m0[TimeValue::ElapsedExclusive]), 30);
    // Module 1: inclusive [10,40] = 30; exclusive [10,20] + [30,40] = 20.
    assert_eq!(
        (
            ns(m1[TimeValue::ElapsedInclusive]),
            ns(m1[TimeValue::ElapsedExclusive])
        ),
        (30, 20)
    );
    assert_eq!(acc.modules[0].calls, 2);
}

#[test]
fn per_call_min_max_under_recursion_and_mixed_calls() {
    // F@0 → G@5 → exit G@15 → F@20 → exit F@50 → exit F@60.
    // Calls of F: outer [0,60] inclusive 60; inner [20,50] inclusive 30.
    // F's exclusive: [0,5] 5 + [15,20] 5 + [20,50] 30 + [50,60] 10 = 50.
    // Per-call exclusive (the call's own frame on top): outer 5+5+10 = 20,
    // inner 30; they add up to F's 50, and avg = 50 / 2 calls.
    let acc = run(
        &[thread(vec![
            enter(0, F),
            enter(5, G),
            exit(15, G),
            enter(20, F),
            exit(50, F),
            exit(60, F),
        ])],
        plain(),
    );
    let f = &acc.functions[F as usize];
    assert_eq!(times(f), (60, 50, 60, 50));
    assert_eq!(per_call(f, TimeValue::ElapsedInclusive), (30, 60, 90));
    assert_eq!(per_call(f, TimeValue::ElapsedExclusive), (20, 30, 50));
    let g = &acc.functions[G as usize];
    assert_eq!(per_call(g, TimeValue::ElapsedInclusive), (10, 10, 10));
}

#[test]
fn call_open_at_thread_end_is_closed_there_and_marked() {
    let mut th = thread(vec![enter(10, F), enter(20, G), exit(30, G)]);
    th.end = Some(50);
    let acc = run(&[th], plain());
    let f = &acc.functions[F as usize];
    // F closed at the thread's end, 50: inclusive 40, exclusive [10,20] + [30,50] = 30.
    assert_eq!(times(f), (40, 30, 40, 30));
    assert_eq!((f.calls, f.open_calls), (1, 1));
    assert_eq!(per_call(f, TimeValue::ElapsedInclusive), (40, 40, 40));
    assert_eq!(acc.threads[0].open_calls, 1);
}

#[test]
fn inherited_frames_hold_time_but_are_not_calls() {
    // A fork child starts at 100 inside F → G (its parent's open calls),
    // calls H [110,130], and returns from G@140 and F@150.
    // F and G: inclusive 50 and 40 of the child's time, but 0 calls;
    // H: 1 call of 20. F's exclusive [140,150] = 10, G's [100,110]+[130,140] = 20.
    let mut th = thread(vec![
        enter(100, F),
        enter(100, G),
        enter(110, H),
        exit(130, H),
        exit(140, G),
        exit(150, F),
    ]);
    th.inherited = 2;
    let acc = run(&[th], plain());
    let [f, g, h] = [F, G, H].map(|x| &acc.functions[x as usize]);
    assert_eq!((f.calls, times(f)), (0, (50, 10, 50, 10)));
    assert_eq!((g.calls, times(g)), (0, (40, 20, 40, 20)));
    assert_eq!((h.calls, times(h)), (1, (20, 20, 20, 20)));
    assert_eq!(per_call(h, TimeValue::ElapsedInclusive), (20, 20, 20));
}

#[test]
fn zero_length_intervals_count_as_calls_with_zero_time() {
    let acc = run(
        &[thread(vec![
            enter(10, F),
            enter(10, G),
            exit(10, G),
            exit(20, F),
        ])],
        plain(),
    );
    let g = &acc.functions[G as usize];
    assert_eq!(times(g), (0, 0, 0, 0));
    assert_eq!(g.calls, 1);
    assert_eq!(per_call(g, TimeValue::ElapsedInclusive), (0, 0, 0));
    assert_eq!(times(&acc.functions[F as usize]), (10, 10, 10, 10));
}

#[test]
fn compensation_subtracts_the_probe_cost_per_interval_never_below_zero() {
    // Cost 5 ns. Intervals between probes: [0,3] 3 → 0 (floor, 3 removed),
    // [3,13] 10 → 5, [13,20] 7 → 2. The thread starts at -: no start bound.
    let events = vec![enter(0, F), enter(3, G), exit(13, G), exit(20, F)];
    let config = Config {
        probe_cost_ns: 5.0,
        compensate: true,
        ..Config::default()
    };
    let acc = run(&[thread(events.clone())], config);
    let f = &acc.functions[F as usize];
    // F inclusive 0 + 5 + 2 = 7, exclusive 0 + 2 = 2; G inclusive = exclusive = 5.
    assert_eq!(times(f), (7, 2, 7, 2));
    assert_eq!(times(&acc.functions[G as usize]), (5, 5, 5, 5));
    // Removed inside F's span: 3 + 5 + 5 = 13.
    assert_eq!(ns(f.probe_overhead), 13);
    // Without compensation (the default) the values are raw.
    let raw = run(
        &[thread(events)],
        Config {
            probe_cost_ns: 5.0,
            ..Config::default()
        },
    );
    assert_eq!(times(&raw.functions[F as usize]), (20, 10, 20, 10));
    // ... and the same probe cost, counted and left in (probe_dominated
    // is judged on it either way).
    assert_eq!(ns(raw.functions[F as usize].probe_overhead), 13);
}

#[test]
fn fractional_probe_cost_is_exact_over_many_intervals() {
    // 1000 calls of G, each exit 100 ns after its enter, cost 0.25 ns:
    // G inclusive = 1000 × 99.75 = 99750 exactly.
    let mut ev = vec![enter(0, F)];
    for i in 0..1000u64 {
        ev.push(enter(200 * i + 100, G));
        ev.push(exit(200 * i + 200, G));
    }
    ev.push(exit(200_100, F));
    let config = Config {
        probe_cost_ns: 0.25,
        compensate: true,
        ..Config::default()
    };
    let acc = run(&[thread(ev)], config);
    assert_eq!(
        ns(acc.functions[G as usize].time[TimeValue::ElapsedInclusive]),
        99_750
    );
}

#[test]
fn compensation_skips_intervals_bounded_by_thread_start_or_end() {
    // Start 0, F [10,20], end 30: only [10,20] is delimited by two probes.
    let mut th = thread(vec![enter(10, F), exit(20, F)]);
    th.start = Some(0);
    th.end = Some(30);
    let acc = run(
        &[th],
        Config {
            probe_cost_ns: 4.0,
            compensate: true,
            ..Config::default()
        },
    );
    assert_eq!(thread_times(&acc.threads[0]), (26, 20, 26, 20));
    assert_eq!(times(&acc.functions[F as usize]).0, 6);
}

#[test]
fn percentages_use_their_own_denominators() {
    // F [0,100] with off-CPU [0,50] inside its only interval... split so that
    // application and elapsed denominators differ: F@0 → G@40 → exit G@60 → exit F@100,
    // off CPU [45,55] (inside G's interval).
    let mut th = thread(vec![enter(0, F), enter(40, G), exit(60, G), exit(100, F)]);
    th.off = vec![off(45, 55)];
    let acc = run(&[th], interval_rule());
    let s = SessionTotals::of_threads(&acc.threads);
    // Session (interval rule): elapsed 100, application 80.
    assert_eq!(
        (ns(s.elapsed_inclusive), ns(s.application_inclusive)),
        (100, 80)
    );
    // F: elapsed incl 100 → 100 %, excl 80 → 80 %; application incl 80 → 100 %, excl 80 → 100 %.
    assert_eq!(
        pcts(&s, &acc.functions[F as usize].time),
        [100.0, 80.0, 100.0, 100.0]
    );
    // G: elapsed 20 → 20 %, application 0.
    assert_eq!(
        pcts(&s, &acc.functions[G as usize].time),
        [20.0, 20.0, 0.0, 0.0]
    );
    // Samples: 3 of 4 → 75 %.
    let s = SessionTotals { samples: 4, ..s };
    assert_eq!(s.sample_pcts(3, 1), [75.0, 25.0]);
}

#[test]
fn exits_that_match_no_entry_are_repaired_and_counted() {
    // F@0 → G@10 → exit F@20 (G's exit lost, e.g. longjmp): G is closed at 20.
    // Then an exit of H which is not on the stack at all: ignored.
    let acc = run(
        &[thread(vec![
            enter(0, F),
            enter(10, G),
            exit(20, F),
            exit(25, H),
        ])],
        plain(),
    );
    assert_eq!(times(&acc.functions[G as usize]).0, 10);
    assert_eq!(times(&acc.functions[F as usize]).0, 20);
    let th = &acc.threads[0];
    assert_eq!((th.repaired_exits, th.unmatched_exits), (1, 1));
}

#[test]
fn frames_found_gone_close_when_the_recorder_says_so() {
    // F@0 → G@10; G is found gone at 30 (its frame lay below the next
    // entry's, e.g. a longjmp out of G), then H@30 runs under F until 50,
    // and F returns at 60. G's call is 20, not the rest of F's; H nests
    // under F, not under G; G counts as repaired.
    let unwind = |ts, f| Event {
        ts: t(ts),
        kind: EventKind::Unwind,
        function: FunctionId(f),
    };
    let acc = run(
        &[thread(vec![
            enter(0, F),
            enter(10, G),
            unwind(30, G),
            enter(30, H),
            exit(50, H),
            exit(60, F),
        ])],
        plain(),
    );
    assert_eq!(times(&acc.functions[G as usize]).0, 20);
    assert_eq!(times(&acc.functions[H as usize]).0, 20);
    assert_eq!(times(&acc.functions[F as usize]).0, 60);
    // F's own time: [0,10] and [50,60]
    assert_eq!(times(&acc.functions[F as usize]).1, 20);
    let th = &acc.threads[0];
    assert_eq!(
        (th.repaired_exits, th.unmatched_exits, th.open_calls),
        (1, 0, 0)
    );
}

#[test]
fn window_keeps_only_the_part_of_each_interval_inside_it() {
    // F [0,100], G [20,80]; window [50,90]: F 40, G [50,80] 30; F excl [80,90] 10.
    let config = Config {
        window: Some((t(50), t(90))),
        ..Config::default()
    };
    let acc = run(
        &[thread(vec![
            enter(0, F),
            enter(20, G),
            exit(80, G),
            exit(100, F),
        ])],
        config,
    );
    assert_eq!(times(&acc.functions[F as usize]), (40, 10, 40, 10));
    assert_eq!(times(&acc.functions[G as usize]), (30, 30, 30, 30));
    // Calls whose enter lies outside the window are not counted.
    assert_eq!(acc.functions[G as usize].calls, 0);
}

#[test]
fn call_tree_and_edges() {
    // F → G [10,20]; F → H → G [30,50]; G → G recursion [35,45] inside.
    let events = vec![
        enter(0, F),
        enter(10, G),
        exit(20, G),
        enter(30, H),
        enter(30, G),
        enter(35, G),
        exit(45, G),
        exit(50, G),
        exit(50, H),
        exit(60, F),
    ];
    let config = Config {
        call_tree: true,
        ..Config::default()
    };
    let acc = run(&[thread(events)], config);
    let tree = &acc.trees[0].tree;
    // root → F → {G, H → G → G}: 5 nodes + root.
    assert_eq!(tree.len(), 6);
    let edges = tree.edges();
    let key = |f: u32| FrameKey::Function(FunctionId(f));
    let fg = edges[&(Some(key(F)), key(G))];
    assert_eq!(
        (fg.calls, ns(fg.time[TimeValue::ElapsedInclusive])),
        (1, 10)
    );
    let hg = edges[&(Some(key(H)), key(G))];
    assert_eq!(
        (hg.calls, ns(hg.time[TimeValue::ElapsedInclusive])),
        (1, 20)
    );
    // G → G: the recursive call, 10 ns.
    let gg = edges[&(Some(key(G)), key(G))];
    assert_eq!(
        (
            gg.calls,
            ns(gg.time[TimeValue::ElapsedInclusive]),
            ns(gg.time[TimeValue::ElapsedExclusive])
        ),
        (1, 10, 10)
    );
    let root = edges[&(None, key(F))];
    assert_eq!(ns(root.time[TimeValue::ElapsedInclusive]), 60);
}

mod sampling {
    use lapse_analysis::sample::SampleAnalysis;
    use lapse_data::*;

    fn frame(id: u32, module: u32, functions: &[(u32, u32)]) -> FrameInfo {
        FrameInfo {
            id: FrameId(id),
            module: ModuleId(module),
            address: 0x100 * u64::from(id),
            functions: functions
                .iter()
                .map(|&(f, line)| FrameFunction {
                    function: FunctionId(f),
                    source_file: Some("a.c".into()),
                    line: Some(line),
                })
                .collect(),
        }
    }

    fn node(id: u32, parent: Option<u32>, frame: u32) -> StackNode {
        StackNode {
            id: StackId(id),
            parent: parent.map(StackId),
            frame: FrameId(frame),
        }
    }

    fn sample(stack: Option<u32>) -> Sample {
        Sample {
            pid: 1,
            tid: 1,
            serial: 0,
            ts: Timestamp::from_nanos(0),
            cpu: 0,
            stack: stack.map(StackId),
            weight: 1,
        }
    }

    #[test]
    fn inclusive_once_per_sample_exclusive_to_the_top() {
        // Frames: 0 = main (fn 0, line 10), 1 = fib (fn 1, line 20), 2 = fib (fn 1, line 21),
        // 3 = leaf in module 1 with an inlined helper (fn 3 inlined into fn 2).
        let frames = vec![
            frame(0, 0, &[(0, 10)]),
            frame(1, 0, &[(1, 20)]),
            frame(2, 0, &[(1, 21)]),
            frame(3, 1, &[(2, 30), (3, 31)]),
        ];
        // Stacks: 0 main; 1 main→fib; 2 main→fib→fib(line 21); 3 main→leaf(inlined).
        let stacks = vec![
            node(0, None, 0),
            node(1, Some(0), 1),
            node(2, Some(1), 2),
            node(3, Some(0), 3),
        ];
        let mut a = SampleAnalysis::default();
        for s in [Some(2), Some(2), Some(1), Some(3), None] {
            a.add(&sample(s));
        }
        a.finish(&stacks, &frames);
        assert_eq!(a.samples, 5);
        // main: on 4 stacks, top of none.
        assert_eq!(
            (
                a.functions[&FunctionId(0)].inclusive,
                a.functions[&FunctionId(0)].exclusive
            ),
            (4, 0)
        );
        // fib: recursion counted once: inclusive 3 (not 5), exclusive 3.
        assert_eq!(
            (
                a.functions[&FunctionId(1)].inclusive,
                a.functions[&FunctionId(1)].exclusive
            ),
            (3, 3)
        );
        // The inlined function 3 is the top of stack 3; its caller fn 2 is inclusive only.
        assert_eq!(
            (
                a.functions[&FunctionId(3)].inclusive,
                a.functions[&FunctionId(3)].exclusive
            ),
            (1, 1)
        );
        assert_eq!(
            (
                a.functions[&FunctionId(2)].inclusive,
                a.functions[&FunctionId(2)].exclusive
            ),
            (1, 0)
        );
        // Lines: a.c:21 is the top of two samples; a.c:20 is the call site in them and top of one.
        let line = |l: u32| a.lines[&("a.c".to_string(), l)];
        assert_eq!((line(21).inclusive, line(21).exclusive), (2, 2));
        assert_eq!((line(20).inclusive, line(20).exclusive), (3, 1));
        // Module 0 on every resolved stack; module 1 top of one.
        assert_eq!(a.modules[&ModuleId(0)].inclusive, 4);
        assert_eq!(
            (
                a.modules[&ModuleId(1)].inclusive,
                a.modules[&ModuleId(1)].exclusive
            ),
            (1, 1)
        );
        // Thread: 5 samples, 1 without a frame (exclusive).
        assert_eq!(
            (
                a.threads[&lapse_data::ThreadKey::new(1, 1)].inclusive,
                a.threads[&lapse_data::ThreadKey::new(1, 1)].exclusive
            ),
            (5, 1)
        );
    }

    fn period(from: u64, to: u64, stack: Option<u32>) -> OffCpuPeriod {
        OffCpuPeriod {
            pid: 1,
            tid: 1,
            serial: 0,
            from: Timestamp::from_nanos(from),
            to: Timestamp::from_nanos(to),
            stack: stack.map(StackId),
            preempted: false,
        }
    }

    #[test]
    fn off_cpu_time_goes_to_every_distinct_function_and_the_top() {
        // main (fn 0) → fib (fn 1) → fib (fn 1): a recursive stack waits 100 ns,
        // main alone waits 30 ns, and 7 ns wait with no stack.
        let frames = vec![frame(0, 0, &[(0, 10)]), frame(1, 0, &[(1, 20)])];
        let stacks = vec![node(0, None, 0), node(1, Some(0), 1), node(2, Some(1), 1)];
        let mut a = SampleAnalysis {
            wall_period_ns: Some(1000),
            ..SampleAnalysis::default()
        };
        a.add(&sample(Some(1)));
        a.add_off_cpu(&period(100, 200, Some(2)), None);
        a.add_off_cpu(&period(300, 330, Some(0)), None);
        a.add_off_cpu(&period(400, 407, None), None);
        // Only the part inside the window counts.
        a.add_off_cpu(&period(500, 600, Some(0)), Some((t(0), t(550))));
        a.finish(&stacks, &frames);
        let main = a.functions[&FunctionId(0)];
        let fib = a.functions[&FunctionId(1)];
        assert_eq!((main.off_cpu.inclusive, main.off_cpu.exclusive), (180, 80));
        // Recursion counts once.
        assert_eq!((fib.off_cpu.inclusive, fib.off_cpu.exclusive), (100, 100));
        let thread = a.threads[&lapse_data::ThreadKey::new(1, 1)];
        assert_eq!(
            (thread.off_cpu.inclusive, thread.off_cpu.exclusive),
            (187, 7)
        );
        assert_eq!(a.off_cpu_ns, 187);
        // Wall time: one sample of 1000 ns on fib's stack, plus the waits.
        assert_eq!((fib.wall.inclusive, fib.wall.exclusive), (1100, 1100));
        assert_eq!((main.wall.inclusive, main.wall.exclusive), (1180, 80));
        // The call tree: paths weigh wall time; the stackless wait is [unknown].
        let mut tree = a.call_tree(&stacks, &frames, |_| true);
        let nodes = tree.len();
        use lapse_analysis::tree::{FrameKey, NodeId, Weight};
        assert_eq!(tree.weight(NodeId::ROOT).inclusive(), 1187);
        let inner = tree.path_node([
            FrameKey::Function(FunctionId(0)),
            FrameKey::Function(FunctionId(1)),
            FrameKey::Function(FunctionId(1)),
        ]);
        assert_eq!(tree.weight(inner).off_cpu.exclusive, 100);
        let unknown = tree.path_node([FrameKey::Unknown]);
        assert_eq!(tree.weight(unknown).off_cpu.exclusive, 7);
        assert_eq!(tree.len(), nodes, "both paths were in the tree");
    }

    #[test]
    fn off_cpu_time_splits_into_preempted_and_blocked() {
        // main (fn 0) → fib (fn 1): fib preempted 40 ns and blocked 60 ns;
        // main alone blocked 30 ns; 7 ns preempted with no stack.
        let frames = vec![frame(0, 0, &[(0, 10)]), frame(1, 0, &[(1, 20)])];
        let stacks = vec![node(0, None, 0), node(1, Some(0), 1)];
        let mut a = SampleAnalysis::default();
        let preempted = |from, to, stack| OffCpuPeriod {
            preempted: true,
            ..period(from, to, stack)
        };
        a.add_off_cpu(&preempted(100, 140, Some(1)), None);
        a.add_off_cpu(&period(200, 260, Some(1)), None);
        a.add_off_cpu(&period(300, 330, Some(0)), None);
        a.add_off_cpu(&preempted(400, 407, None), None);
        a.finish(&stacks, &frames);
        let main = a.functions[&FunctionId(0)];
        let fib = a.functions[&FunctionId(1)];
        assert_eq!((fib.off_cpu.inclusive, fib.preempted.inclusive), (100, 40));
        assert_eq!(fib.preempted.exclusive, 40);
        assert_eq!(
            (main.off_cpu.inclusive, main.preempted.inclusive),
            (130, 40)
        );
        assert_eq!(main.preempted.exclusive, 0);
        let thread = a.threads[&lapse_data::ThreadKey::new(1, 1)];
        assert_eq!(
            (thread.preempted.inclusive, thread.preempted.exclusive),
            (47, 7)
        );
        // The tree carries the split too.
        let mut tree = a.call_tree(&stacks, &frames, |_| true);
        let nodes = tree.len();
        use lapse_analysis::tree::{FrameKey, NodeId};
        let fib_node = tree.path_node([
            FrameKey::Function(FunctionId(0)),
            FrameKey::Function(FunctionId(1)),
        ]);
        assert_eq!(tree.len(), nodes, "the path was in the tree");
        assert_eq!(tree.weight(fib_node).preempted.inclusive, 40);
        assert_eq!(tree.weight(NodeId::ROOT).preempted.inclusive, 47);
    }

    fn t(ns: u64) -> Timestamp {
        Timestamp::from_nanos(ns)
    }

    #[test]
    fn samples_without_line_information_have_a_row() {
        // main has a line; its callee, in a stripped library, has none.
        let mut frames = vec![frame(0, 0, &[(0, 10)]), frame(1, 1, &[(1, 0)])];
        frames[1].functions[0].line = None;
        frames[1].functions[0].source_file = None;
        let stacks = vec![node(0, None, 0), node(1, Some(0), 1)];
        let mut a = SampleAnalysis::default();
        for s in [Some(0), Some(1), Some(1)] {
            a.add(&sample(s));
        }
        a.finish(&stacks, &frames);
        assert_eq!((a.no_line.inclusive, a.no_line.exclusive), (2, 2));
        let main = a.lines[&("a.c".to_string(), 10)];
        assert_eq!((main.inclusive, main.exclusive), (3, 1));
    }
}

#[test]
fn preempted_time_is_the_runnable_part_of_each_row_s_off_cpu_time() {
    // F [0, 100] calls G [20, 60]. Off the CPU: blocked [10, 15] (in F's
    // own interval), preempted [30, 38] (in G), preempted [55, 70] (5 in
    // G, 10 back in F), blocked [80, 84] overlapping preempted [82, 90]
    // (one merged period [80, 90] off the CPU: 10, of which 8 preempted).
    let mut th = thread(vec![enter(0, F), enter(20, G), exit(60, G), exit(100, F)]);
    th.end = Some(120);
    let preempt = |from, to| OsEvent {
        kind: OsEventKind::Preempt,
        ..off(from, to)
    };
    th.off = vec![
        off(10, 15),
        preempt(30, 38),
        preempt(55, 70),
        off(80, 84),
        preempt(82, 90),
        // after the last call, in the thread's empty-stack tail: the
        // thread's, no function's
        preempt(105, 107),
    ];
    for config in [plain(), interval_rule()] {
        let acc = run(&[th.clone()], config);
        let f = &acc.functions[F as usize];
        let g = &acc.functions[G as usize];
        // G: 8 + 5 = 13. F (inclusive, G's time in it): 13 + 10 + 8 = 31.
        assert_eq!(ns(g.preempted), 13, "{:?}", config.application);
        assert_eq!(ns(f.preempted), 31, "{:?}", config.application);
        // Modules: F's (module 0) = 31, G's (module 1) = 13.
        assert_eq!(ns(acc.modules[0].preempted), 31);
        assert_eq!(ns(acc.modules[1].preempted), 13);
        // The thread: 31 + 2 = 33, as the session's preempted_ns counts.
        assert_eq!(ns(acc.threads[0].preempted), 33);
    }
    // The exact rule's application time: F loses all 5 + 8 + 15 + 10 = 38
    // off the CPU, blocked and preempted alike; 38 - 31 = 7 of it blocked.
    let acc = run(&[th], plain());
    let f = &acc.functions[F as usize];
    assert_eq!(
        ns(f.time[TimeValue::ElapsedInclusive]) - ns(f.time[TimeValue::ApplicationInclusive]),
        38
    );
}

fn paused(from: u64, to: u64) -> Paused {
    Paused {
        from: t(from),
        to: t(to),
    }
}

#[test]
fn a_pause_closes_open_calls_and_its_time_counts_nowhere() {
    // F@10 → G@20; paused [30, 60), in which H's call (45-50) is left out;
    // G's exit at 70 matches nothing (G was closed at 30); H [80, 90].
    let mut th = thread(vec![
        enter(10, F),
        enter(20, G),
        enter(45, H),
        exit(50, H),
        exit(70, G),
        enter(80, H),
        exit(90, H),
    ]);
    th.start = Some(0);
    th.end = Some(100);
    th.paused = vec![paused(30, 60)];
    let acc = run(&[th], plain());
    let (f, g, h) = (
        &acc.functions[F as usize],
        &acc.functions[G as usize],
        &acc.functions[H as usize],
    );
    // F: [10, 30] inclusive, [10, 20] exclusive; closed open at the pause
    assert_eq!(times(f), (20, 10, 20, 10));
    assert_eq!((f.calls, f.open_calls), (1, 1));
    // G: [20, 30]
    assert_eq!(times(g), (10, 10, 10, 10));
    assert_eq!((g.calls, g.open_calls), (1, 1));
    // H: the call after the resume only
    assert_eq!(times(h), (10, 10, 10, 10));
    assert_eq!(h.calls, 1);
    // the thread: [0, 30] + [60, 100] = 70; empty stack [0,10] + [60,80] + [90,100] = 40
    let th = &acc.threads[0];
    assert_eq!(thread_times(th), (70, 40, 70, 40));
    assert_eq!((th.open_calls, th.unmatched_exits), (2, 1));
}

#[test]
fn a_pause_to_the_end_keeps_only_what_came_before() {
    // paused from 50 to the end of the session: F [10, 50], nothing after
    let mut th = thread(vec![enter(10, F), exit(60, F), enter(70, G), exit(80, G)]);
    th.start = Some(0);
    th.end = Some(100);
    th.paused = vec![paused(50, u64::MAX)];
    let acc = run(&[th], plain());
    assert_eq!(times(&acc.functions[F as usize]), (40, 40, 40, 40));
    assert_eq!(acc.functions[G as usize].calls, 0);
    assert_eq!(thread_times(&acc.threads[0]), (50, 10, 50, 10));
}

#[test]
fn a_thread_that_starts_while_paused_counts_from_the_resume() {
    // started at 10 inside the pause [0, 40): its H call at 20 is left out,
    // its time runs from 40 to its end at 50
    let mut th = thread(vec![enter(20, H), exit(30, H), enter(42, F), exit(48, F)]);
    th.start = Some(10);
    th.end = Some(50);
    th.paused = vec![paused(0, 40)];
    let acc = run(&[th], plain());
    assert_eq!(acc.functions[H as usize].calls, 0);
    assert_eq!(times(&acc.functions[F as usize]), (6, 6, 6, 6));
    assert_eq!(thread_times(&acc.threads[0]), (10, 4, 10, 4));
}

#[test]
fn a_fork_child_born_paused_counts_its_calls_after_the_resume() {
    // a child inheriting F → G at 10, inside the pause [0, 50): its
    // inherited enters are left out, and H after the resume is a call
    let mut th = thread(vec![enter(10, F), enter(10, G), enter(60, H), exit(70, H)]);
    th.start = Some(10);
    th.end = Some(80);
    th.inherited = 2;
    th.paused = vec![paused(0, 50)];
    let acc = run(&[th], plain());
    assert_eq!(acc.functions[H as usize].calls, 1);
    assert_eq!(times(&acc.functions[H as usize]), (10, 10, 10, 10));
}
