//! Pause, resume and marks while sampling. The target has no runtime of
//! its own under sampling: when the options ask for pauses (`--start-paused`,
//! `--signal`, `--delay`, `--duration`) or the program calls the API
//! (`lapse_pause`, `lapse::mark`...), the lapse runtime is preloaded in a
//! control-only mode (its threads record no events, no arena, no library
//! calls traced) and tells this side each pause, resume and mark over the
//! socket the instrumentation recorder uses. They go into the file as the
//! same records instrumentation writes, and the analysis leaves the samples
//! of the paused stretches out (the kernel keeps sampling meanwhile: a
//! paused stretch costs what sampling costs, not more).

use std::io;
use std::path::Path;

use lapse_data::{ControlEvent, Record, Timestamp, Toggle};
use lapse_rt::protocol::{self, Msg};

use crate::instrument::session_dir::SessionDir;
use crate::instrument::tick_clock::TickClock;
use crate::linux::socket::{Recv, SeqpacketConn, SeqpacketListener};
use crate::{ControlOptions, RecordError};

/// The API's look-up names: a program that holds one calls the API.
const API_SYMBOL: &[u8] = b"lapse_rt_pause";

pub(crate) struct SampleControl {
    /// (removed when the recording ends)
    _dir: SessionDir,
    listener: SeqpacketListener,
    conns: Vec<SeqpacketConn>,
    clock: TickClock,
    buf: Vec<u8>,
    /// What the target is started with.
    pub(crate) env: Vec<(String, String)>,
    options: ControlOptions,
    resume_at: Option<Timestamp>,
    /// Processes that took `--signal`'s signal for their own handler.
    pub(crate) signal_taken: Vec<u32>,
}

impl SampleControl {
    /// The control channel for `program`, or `None` when nothing asks for it.
    pub(crate) fn new(
        options: &ControlOptions,
        program: &Path,
    ) -> Result<Option<SampleControl>, RecordError> {
        let uses_api = std::fs::read(program)
            .is_ok_and(|b| b.windows(API_SYMBOL.len()).any(|w| w == API_SYMBOL));
        if *options == ControlOptions::default() && !uses_api {
            return Ok(None);
        }
        let dir = SessionDir::create()?;
        let listener = SeqpacketListener::bind(&dir.socket_path()).map_err(|source| {
            RecordError::SessionDir {
                path: dir.socket_path(),
                source,
            }
        })?;
        let mut preload = dir.runtime_path().display().to_string();
        if let Ok(old) = std::env::var("LD_PRELOAD") {
            if !old.is_empty() {
                preload = format!("{preload} {old}");
            }
        }
        let mut env = vec![
            ("LD_PRELOAD".to_owned(), preload),
            (
                protocol::ENV_SOCKET.to_owned(),
                dir.socket_path().display().to_string(),
            ),
            (protocol::ENV_CONTROL_ONLY.to_owned(), "1".to_owned()),
            (protocol::ENV_NO_ARENA.to_owned(), "1".to_owned()),
            (protocol::ENV_NO_LIBCALLS.to_owned(), "1".to_owned()),
        ];
        let (control_env, resume_at) = options.runtime_env();
        env.extend(control_env);
        Ok(Some(SampleControl {
            _dir: dir,
            listener,
            conns: Vec::new(),
            clock: TickClock::calibrate(None),
            buf: vec![0; protocol::MAX_DATAGRAM],
            env,
            options: options.clone(),
            resume_at,
            signal_taken: Vec::new(),
        }))
    }

    /// The pauses and resumes the options make, for a recording that began
    /// at `start`.
    pub(crate) fn options_records(&self, start: Timestamp) -> Vec<Record> {
        let by_recorder = |at| Toggle { pid: 0, tid: 0, at };
        let mut out = Vec::new();
        if self.options.start_paused || self.resume_at.is_some() {
            out.push(ControlEvent::Pause(by_recorder(start)));
        }
        if let (Some(at), false) = (self.resume_at, self.options.start_paused) {
            out.push(ControlEvent::Resume(by_recorder(at)));
        }
        if let Some(d) = self.options.duration {
            let at = Timestamp::from_nanos(start.as_nanos() + d.as_nanos() as u64);
            out.push(ControlEvent::Pause(by_recorder(at)));
        }
        out.into_iter().map(Record::Control).collect()
    }

    /// New connections, then every datagram waiting: each pause, resume and
    /// mark becomes a record passed to `write`.
    pub(crate) fn pump(
        &mut self,
        mut write: impl FnMut(&Record) -> io::Result<()>,
    ) -> io::Result<()> {
        while let Ok(Some(c)) = self.listener.accept() {
            self.conns.push(c);
        }
        let mut closed = Vec::new();
        for (i, c) in self.conns.iter().enumerate() {
            loop {
                let got = c.recv_with_fd(&mut self.buf)?;
                let n = match got.recv {
                    Recv::Datagram(n) => n,
                    Recv::WouldBlock => break,
                    Recv::Closed => {
                        closed.push(i);
                        break;
                    }
                };
                let d = &self.buf[..n];
                let Ok(Msg::Control {
                    from, op, ticks, ..
                }) = Msg::parse(d)
                else {
                    continue; // (hello, early events: not this recording's)
                };
                let at = self.clock.to_timestamp(ticks);
                let text = protocol::control_text(d);
                match crate::control::event(op, from.pid, from.tid, at, text) {
                    Some(event) => write(&Record::Control(event))?,
                    None if !self.signal_taken.contains(&from.pid) => {
                        self.signal_taken.push(from.pid)
                    }
                    None => {}
                }
            }
        }
        for i in closed.into_iter().rev() {
            self.conns.remove(i);
        }
        Ok(())
    }
}
