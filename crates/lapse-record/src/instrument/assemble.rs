//! The recording assembler: what the runtimes say, turned into data-file
//! records. It owns the address book, the threads' event streams and the
//! processes the runtimes announced, and it does no I/O of its own (no
//! sockets, perf rings or /proc): the recorder's [`Session`] drives it from
//! its connections, `lapse recover` from a spill file, and the unit tests
//! below from hand-made messages. One dispatch, so the two cannot drift.
//!
//! [`Session`]: super::session::Session

use std::collections::HashMap;

use lapse_data::codec::EventEncoder;
use lapse_data::{InheritedFrames, Record, ThreadKey, Timestamp};
use lapse_rt::protocol::{Batch, Msg, RawEvent, Sender, Ticks};

use super::address::AddressBook;
use super::threads::Threads;
use super::tick_clock::TickClock;
use super::workers::SharedBook;
use crate::RecordError;

/// Where the assembler's output goes: the data file while recording, the
/// recovered part of one in `lapse recover`.
pub(super) trait Sink {
    fn record(&mut self, record: &Record) -> Result<(), RecordError>;
    fn events(&mut self, thread: ThreadKey, events: &EventEncoder) -> Result<(), RecordError>;
}

/// A thread's name when the kernel gave none: its program's file name.
pub(super) fn program_name(command: &[String]) -> Option<String> {
    let c = command.first()?;
    Some(c.rsplit('/').next().unwrap_or(c).to_owned())
}

/// The thread a runtime message came from.
pub(super) fn thread_of(from: Sender) -> ThreadKey {
    ThreadKey::new(from.pid, from.tid)
}

impl Sink for super::output::Output {
    fn record(&mut self, record: &Record) -> Result<(), RecordError> {
        super::output::Output::record(self, record)
    }

    fn events(&mut self, thread: ThreadKey, events: &EventEncoder) -> Result<(), RecordError> {
        super::output::Output::events(self, thread, events)
    }
}

/// A process as its runtimes described it.
#[derive(Default)]
pub(super) struct Proc {
    pub(super) command: Vec<String>,
    pub(super) ppid: Option<u32>,
    pub(super) start: Option<Timestamp>,
    /// When its current image began to be replaced (the runtime's exec
    /// message), until the new image says hello.
    pub(super) exec_at: Option<Timestamp>,
    /// A runtime in it said hello (or it is a fork child of one): a later
    /// hello is a new image.
    pub(super) said_hello: bool,
}

/// What the caller must act on after a message.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Took {
    Nothing,
    /// A thread other than the main one exec'd: under its own tid it ends
    /// here (it goes on as the main thread).
    ThreadEnded {
        thread: ThreadKey,
        at: Timestamp,
    },
}

pub(super) struct Assembler {
    pub(super) book: SharedBook,
    pub(super) threads: Threads,
    pub(super) clock: TickClock,
    pub(super) procs: HashMap<u32, Proc>,
    /// The first runtime's measured probe cost, and the spread of its trials
    /// (90th over 10th percentile, in percent).
    pub(super) probe_cost_ns: Option<f64>,
    pub(super) probe_spread_pct: u32,
    /// Processes that installed their own handler for `--signal`'s signal
    /// (which then toggles nothing in them).
    pub(super) signal_taken: Vec<u32>,
}

impl Assembler {
    /// An assembler following at most `max_threads` threads alive at once.
    pub(super) fn new(book: AddressBook, clock: TickClock, max_threads: usize) -> Assembler {
        Assembler {
            book: SharedBook::new(book),
            threads: Threads::with_limit(max_threads),
            clock,
            procs: HashMap::new(),
            probe_cost_ns: None,
            probe_spread_pct: 0,
            signal_taken: Vec::new(),
        }
    }

    /// Whether a hello from `pid` would be a new image of a process already
    /// known (its old image's last messages must be taken first).
    pub(super) fn is_exec(&self, pid: u32) -> bool {
        self.procs.get(&pid).is_some_and(|p| p.said_hello)
    }

    /// Takes one runtime message; `events` are an `Events` message's (from
    /// [`lapse_rt::protocol::events`]), `body` the datagram after its header
    /// (a mark's text). Arena messages are the transport's and are
    /// ignored here (their events come in through [`Self::events`]).
    pub(super) fn message(
        &mut self,
        msg: Msg,
        events: impl Iterator<Item = RawEvent> + Clone,
        body: &[u8],
        sink: &mut impl Sink,
    ) -> Result<Took, RecordError> {
        let from = msg.from();
        match msg {
            Msg::Hello {
                probe_cost_x1024,
                probe_spread_pct,
                ticks,
                ppid,
                ..
            } => {
                let at = self.clock.to_timestamp(ticks);
                self.hello(from.pid, probe_cost_x1024, probe_spread_pct, ppid, at, sink)?;
            }
            Msg::Events { batch, .. } => {
                self.events(from, &batch, events, sink)?;
            }
            Msg::Arena { .. } | Msg::ShmEvents { .. } => {}
            Msg::Fork { ticks, .. } => self.threads.fork(thread_of(from), ticks),
            Msg::Child {
                fork_ticks, ppid, ..
            } => self.child(from, fork_ticks, ppid, sink)?,
            Msg::Exec { ticks, .. } => {
                let at = self.clock.to_timestamp(ticks);
                self.procs.entry(from.pid).or_default().exec_at = Some(at);
                if from.tid != from.pid {
                    return Ok(Took::ThreadEnded {
                        thread: thread_of(from),
                        at,
                    });
                }
            }
            Msg::Control {
                op,
                ticks,
                stalled_ticks,
                ..
            } => {
                // (on the sending thread's timeline: its waits for the
                // recorder are cut out of it)
                let real = self.clock.to_timestamp(ticks);
                // (a thread none of whose events came yet has cut nothing
                // so far: all its waits are still to be cut)
                let at = match self.threads.get(thread_of(from)) {
                    Some(s) => s.stalls.map_at(real, stalled_ticks, &self.clock),
                    None => super::stalls::StallTimeline::default().map_at(
                        real,
                        stalled_ticks,
                        &self.clock,
                    ),
                };
                match crate::control::event(op, from.pid, from.tid, at, body) {
                    Some(event) => sink.record(&Record::Control(event))?,
                    None if !self.signal_taken.contains(&from.pid) => {
                        self.signal_taken.push(from.pid)
                    }
                    None => {}
                }
            }
        }
        Ok(Took::Nothing)
    }

    /// Adds one batch of a thread's events (from a datagram, an arena
    /// buffer or what a dead process left in one).
    pub(super) fn events(
        &mut self,
        from: Sender,
        batch: &Batch,
        events: impl Iterator<Item = RawEvent> + Clone,
        sink: &mut impl Sink,
    ) -> Result<(), RecordError> {
        if batch.discard {
            return Ok(());
        }
        let encoded = self.threads.add_events(
            thread_of(from),
            batch.first_index,
            batch.stalled_ticks,
            events,
            &mut self.book.lock(),
            &self.clock,
        );
        self.write_book(sink)?;
        if let Some(b) = encoded {
            sink.events(thread_of(from), &b)?;
        }
        Ok(())
    }

    /// Module and mapping records the address book has not handed out yet.
    pub(super) fn write_book(&mut self, sink: &mut impl Sink) -> Result<(), RecordError> {
        let pending = self.book.lock().take_pending();
        for r in pending {
            sink.record(&r)?;
        }
        Ok(())
    }

    /// A process image starts: a new process, or `pid` after an exec.
    fn hello(
        &mut self,
        pid: u32,
        probe_cost_x1024: u64,
        probe_spread_pct: u32,
        ppid: u32,
        at: Timestamp,
        sink: &mut impl Sink,
    ) -> Result<(), RecordError> {
        if self.probe_cost_ns.is_none() && probe_cost_x1024 > 0 {
            self.probe_cost_ns = Some(self.clock.ticks_to_ns(probe_cost_x1024 as f64 / 1024.0));
            self.probe_spread_pct = probe_spread_pct;
        }
        if self.is_exec(pid) {
            // The old image's open calls end where its exec began.
            let end = self.procs.get(&pid).and_then(|p| p.exec_at).unwrap_or(at);
            for (thread, batch) in self.threads.exec(pid, end) {
                sink.events(thread, &batch)?;
            }
        }
        // (the kernel's exec record already started a new mapping generation)
        let gen = self.book.lock().gen_at(pid, at);
        self.threads.set_gen(pid, gen);
        let p = self.procs.entry(pid).or_default();
        p.said_hello = true;
        p.exec_at = None;
        p.start.get_or_insert(at);
        p.ppid.get_or_insert(ppid);
        Ok(())
    }

    /// A fork child's first message: it starts inside the calls its parent
    /// thread had open, which are its frames but not its calls.
    fn child(
        &mut self,
        from: Sender,
        fork_ticks: Ticks,
        ppid: u32,
        sink: &mut impl Sink,
    ) -> Result<(), RecordError> {
        let at = self.clock.to_timestamp(fork_ticks);
        self.book.lock().fork(ppid, from.pid, at);
        self.threads
            .set_gen(from.pid, self.book.lock().gen_at(from.pid, at));
        let frames = self.threads.child(thread_of(from), ppid, fork_ticks, at);
        if frames > 0 {
            sink.record(&Record::Inherited(InheritedFrames {
                pid: from.pid,
                tid: from.tid,
                serial: 0,
                frames,
            }))?;
        }
        let parent_command = self
            .procs
            .get(&ppid)
            .map(|p| p.command.clone())
            .unwrap_or_default();
        let p = self.procs.entry(from.pid).or_default();
        p.ppid = Some(ppid);
        p.start.get_or_insert(at);
        p.said_hello = true;
        if p.command.is_empty() {
            p.command = parent_command;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::address::NewMapping;
    use super::*;
    use lapse_data::{EventKind, TscCalibration};

    /// Everything the assembler handed out, in order.
    #[derive(Default)]
    struct Collect {
        records: Vec<Record>,
        /// (pid, tid, enter or exit, function id, ns)
        events: Vec<(u32, u32, char, u32, u64)>,
    }

    impl Sink for Collect {
        fn record(&mut self, record: &Record) -> Result<(), RecordError> {
            self.records.push(record.clone());
            Ok(())
        }

        fn events(&mut self, thread: ThreadKey, events: &EventEncoder) -> Result<(), RecordError> {
            for e in events.events() {
                let kind = if e.kind == EventKind::Enter { '>' } else { '<' };
                self.events
                    .push((thread.pid, thread.tid, kind, e.function.0, e.ts.as_nanos()));
            }
            Ok(())
        }
    }

    const A: u64 = 0x1010;
    const B: u64 = 0x1020;

    /// One tick per nanosecond from 0, and an offline book (no /proc) where
    /// pids 1 and 2 map the same module at 0x1000.
    fn assembler() -> Assembler {
        let clock = TickClock::from_calibration(&TscCalibration {
            ticks_per_sec: 1e9,
            ref_ticks: 0,
            ref_ns: 0,
        });
        let mut book = AddressBook::resume(&[], &[], &[]);
        for pid in [1, 2] {
            book.add_mapping(NewMapping {
                pid,
                start: 0x1000,
                len: 0x1000,
                pgoff: 0,
                path: "[test]",
                build_id: None,
                time: Timestamp::from_nanos(0),
            });
        }
        Assembler::new(book, clock, usize::MAX)
    }

    fn from(pid: u32, tid: u32) -> Sender {
        Sender { pid, tid }
    }

    fn hello(pid: u32, ticks: u64, ppid: u32) -> Msg {
        Msg::Hello {
            from: from(pid, pid),
            probe_cost_x1024: 10 * 1024,
            probe_spread_pct: 150,
            ticks: Ticks::new(ticks),
            ppid,
        }
    }

    /// Sends `msg` (with `events`: (ticks, exit?, address)).
    fn send(
        asm: &mut Assembler,
        sink: &mut Collect,
        msg: Msg,
        events: &[(u64, bool, u64)],
    ) -> Took {
        let events = events.iter().map(|&(ticks, is_exit, function)| RawEvent {
            function,
            ticks: Ticks::new(ticks),
            is_exit,
            sp: 0,
            leaf: 0,
        });
        asm.message(msg, events, &[], sink)
            .expect("a sink that cannot fail")
    }

    fn batch(first_index: u64, count: u32) -> Batch {
        Batch {
            first_index,
            stalled_ticks: Ticks::new(0),
            count,
            discard: false,
        }
    }

    /// Ends every stream, as the end of a recording does.
    fn drain(asm: &mut Assembler, sink: &mut Collect) {
        let all: Vec<_> = asm
            .threads
            .streams_mut()
            .filter_map(|(key, s)| s.take_batch(true).map(|b| (key, b)))
            .collect();
        for (thread, b) in all {
            sink.events(thread, &b).unwrap();
        }
    }

    #[test]
    fn hello_sets_the_probe_cost_once_and_the_process() {
        let (mut asm, mut sink) = (assembler(), Collect::default());
        assert_eq!(
            send(&mut asm, &mut sink, hello(1, 100, 7), &[]),
            Took::Nothing
        );
        let mut second = hello(2, 200, 1);
        if let Msg::Hello {
            probe_cost_x1024, ..
        } = &mut second
        {
            *probe_cost_x1024 = 99 * 1024;
        }
        send(&mut asm, &mut sink, second, &[]);
        assert_eq!(asm.probe_cost_ns, Some(10.0), "the first runtime's");
        assert_eq!(asm.probe_spread_pct, 150);
        let p = &asm.procs[&1];
        assert_eq!(
            (p.ppid, p.start, p.said_hello),
            (Some(7), Some(Timestamp::from_nanos(100)), true)
        );
    }

    #[test]
    fn a_fork_child_starts_inside_its_parents_calls_as_frames_not_calls() {
        let (mut asm, mut sink) = (assembler(), Collect::default());
        send(&mut asm, &mut sink, hello(1, 0, 0), &[]);
        asm.procs.get_mut(&1).unwrap().command = vec!["prog".into()];
        // pid 1 enters A then B, forks at 30 with both open.
        send(
            &mut asm,
            &mut sink,
            Msg::Events {
                from: from(1, 1),
                batch: batch(0, 2),
            },
            &[(10, false, A), (20, false, B)],
        );
        send(
            &mut asm,
            &mut sink,
            Msg::Fork {
                from: from(1, 1),
                ticks: Ticks::new(30),
            },
            &[],
        );
        let child = Msg::Child {
            from: from(2, 2),
            fork_ticks: Ticks::new(30),
            ppid: 1,
            parent_tid: 1,
        };
        send(&mut asm, &mut sink, child, &[]);
        // The child returns from B and A.
        send(
            &mut asm,
            &mut sink,
            Msg::Events {
                from: from(2, 2),
                batch: batch(0, 2),
            },
            &[(40, true, B), (50, true, A)],
        );
        drain(&mut asm, &mut sink);
        let inherited: Vec<_> = sink
            .records
            .iter()
            .filter_map(|r| match r {
                Record::Inherited(i) => Some(*i),
                _ => None,
            })
            .collect();
        assert_eq!(
            inherited,
            [InheritedFrames {
                pid: 2,
                tid: 2,
                serial: 0,
                frames: 2
            }]
        );
        let child: Vec<_> = sink
            .events
            .iter()
            .filter(|e| e.0 == 2)
            .map(|e| (e.2, e.4))
            .collect();
        assert_eq!(child, [('>', 30), ('>', 30), ('<', 40), ('<', 50)]);
        let p = &asm.procs[&2];
        assert_eq!(
            (p.ppid, p.command.clone(), p.said_hello),
            (Some(1), vec!["prog".to_owned()], true)
        );
    }

    #[test]
    fn exec_closes_the_old_images_calls_where_the_exec_began() {
        let (mut asm, mut sink) = (assembler(), Collect::default());
        send(&mut asm, &mut sink, hello(1, 0, 0), &[]);
        send(
            &mut asm,
            &mut sink,
            Msg::Events {
                from: from(1, 1),
                batch: batch(0, 1),
            },
            &[(10, false, A)],
        );
        // A second thread execs at 60; the new image says hello at 90.
        let took = send(
            &mut asm,
            &mut sink,
            Msg::Exec {
                from: from(1, 3),
                ticks: Ticks::new(60),
            },
            &[],
        );
        assert_eq!(
            took,
            Took::ThreadEnded {
                thread: ThreadKey::new(1, 3),
                at: Timestamp::from_nanos(60)
            }
        );
        assert!(asm.is_exec(1));
        send(&mut asm, &mut sink, hello(1, 90, 0), &[]);
        let closed: Vec<_> = sink.events.iter().map(|e| (e.2, e.4)).collect();
        assert_eq!(
            closed,
            [('>', 10), ('<', 60)],
            "closed at the exec, not the hello"
        );
        assert_eq!(asm.procs[&1].exec_at, None);
    }

    #[test]
    fn discarded_batches_and_arena_messages_add_nothing() {
        let (mut asm, mut sink) = (assembler(), Collect::default());
        let mut b = batch(0, 1);
        b.discard = true;
        send(
            &mut asm,
            &mut sink,
            Msg::Events {
                from: from(1, 1),
                batch: b,
            },
            &[(10, false, A)],
        );
        let arena = Msg::Arena {
            from: from(1, 1),
            bytes: 1 << 20,
            bufs: 4,
            buf_events: 16,
        };
        send(&mut asm, &mut sink, arena, &[]);
        drain(&mut asm, &mut sink);
        assert!(sink.events.is_empty());
    }
}
