//! What an export keeps of a recording: `lapse export`'s filters, the
//! report's own [`Query`] (threads, processes, a time window, a function's
//! subtree) and `--min-duration` (docs/exports.md).
//!
//! The call-tree exports get threads and window from the analysis, which
//! was made with the same query, and the subtree from [`Selection::tree`].
//! The timeline exports read the file again; [`Selection::threads`],
//! [`Selection::sample_keys`] and [`StepFilter`] (inside
//! [`crate::timeline::walk`]) give them the same selection, so every format
//! shows the same calls.

use std::borrow::Cow;
use std::time::Duration;

use lapse_analysis::tree::{CallTree, FrameKey, Weight};
use lapse_analysis::Query;
use lapse_data::{
    DataFile, FrameId, FunctionId, OffCpuPeriod, Sample, StackId, ThreadInfo, ThreadKey, Timestamp,
};
use regex::Regex;

use crate::timeline::{Moment, Step};

/// The part of a recording an export writes.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    pids: Vec<u32>,
    tids: Vec<u32>,
    /// `--from`/`--to` as the file's timestamps.
    window: Option<(Timestamp, Timestamp)>,
    function: Option<Regex>,
    /// Whether each function of the file matches `function`.
    matching: Vec<bool>,
    /// With `function`: whether each sampled stack node has a matching
    /// frame at or above it (a stack's parent comes before it).
    stack_matches: Vec<bool>,
    /// Timeline calls shorter than this are not events of their own.
    min_duration_ns: u64,
}

impl Selection {
    /// Everything: the export of the whole recording.
    pub fn all() -> Selection {
        Selection::default()
    }

    /// The threads, window and function of `query`, and calls of at least
    /// `min_duration` on timelines.
    pub fn new(file: &DataFile, query: &Query, min_duration: Option<Duration>) -> Selection {
        let matching = query.function.as_ref().map_or_else(Vec::new, |r| {
            file.functions.iter().map(|f| r.is_match(&f.name)).collect()
        });
        let mut sel = Selection {
            pids: query.pids.clone(),
            tids: query.tids.clone(),
            window: query.window(file),
            function: query.function.clone(),
            matching,
            stack_matches: Vec::new(),
            min_duration_ns: min_duration
                .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        };
        if sel.function.is_some() {
            let mut kept: Vec<bool> = Vec::with_capacity(file.stacks.len());
            for (i, node) in file.stacks.iter().enumerate() {
                let above = node
                    .parent
                    .filter(|p| (p.0 as usize) < i)
                    .is_some_and(|p| kept[p.0 as usize]);
                kept.push(above || sel.frame_matches(file, node.frame));
            }
            sel.stack_matches = kept;
        }
        sel
    }

    /// Whether `--min-duration` leaves calls out of timelines.
    pub fn min_duration_ns(&self) -> u64 {
        self.min_duration_ns
    }

    pub fn wants_thread(&self, thread: ThreadKey) -> bool {
        (self.pids.is_empty() || self.pids.contains(&thread.pid))
            && (self.tids.is_empty() || self.tids.contains(&thread.tid))
    }

    /// `--from`/`--to` as the file's timestamps.
    pub fn window(&self) -> Option<(Timestamp, Timestamp)> {
        self.window
    }

    /// Whether `--pid` keeps process `pid` (its name is written even when
    /// `--tid` leaves none of its threads).
    pub fn wants_process(&self, pid: u32) -> bool {
        self.pids.is_empty() || self.pids.contains(&pid)
    }

    /// The program's marks (`lapse_mark`) of the selected threads inside
    /// `--from`/`--to`, in time order: instants on the timelines.
    pub fn marks<'s, 'f: 's>(
        &'s self,
        file: &'f DataFile,
    ) -> impl Iterator<Item = &'f lapse_data::Mark> + 's {
        file.marks
            .iter()
            .filter(|m| self.wants_thread(ThreadKey::new(m.pid, m.tid)) && self.in_window(m.at))
    }

    /// Whether a timestamp lies inside `--from`/`--to`.
    pub fn in_window(&self, ts: Timestamp) -> bool {
        self.window.is_none_or(|(from, to)| ts >= from && ts <= to)
    }

    /// Every selected thread with a record or with events, ordered by
    /// (pid, tid), its start and end cut to the window; a thread wholly
    /// outside the window is left out.
    pub fn threads(&self, file: &DataFile) -> Vec<ThreadInfo> {
        let mut out = file.all_threads();
        out.retain(|t| self.wants_thread(t.key()));
        if let Some((from, to)) = self.window {
            out.retain(|t| t.start.is_none_or(|s| s <= to) && t.end.is_none_or(|e| e >= from));
            for t in &mut out {
                t.start = t.start.map(|s| s.max(from));
                t.end = t.end.map(|e| e.min(to));
            }
        }
        out
    }

    /// Whether `--function` was given.
    pub fn has_function(&self) -> bool {
        self.function.is_some()
    }

    /// Whether a sampled frame is (or has inlined) a function `--function` names.
    pub fn frame_matches(&self, file: &DataFile, frame: FrameId) -> bool {
        let Some(f) = file.frames.get(frame.0 as usize) else {
            return false;
        };
        if f.functions.is_empty() {
            let key = FrameKey::Unresolved {
                module: f.module,
                address: f.address,
            };
            return self.matches(file, key);
        }
        f.functions
            .iter()
            .any(|ff| self.function_matches(ff.function))
    }

    /// Whether a frame is one `--function` names (every frame without it).
    pub fn matches(&self, file: &DataFile, key: FrameKey) -> bool {
        let Some(r) = &self.function else {
            return true;
        };
        match key {
            FrameKey::Function(f) => self.function_matches(f),
            other => r.is_match(&other.label(file)),
        }
    }

    fn function_matches(&self, f: FunctionId) -> bool {
        self.function.is_none() || self.matching.get(f.0 as usize).copied().unwrap_or(false)
    }

    /// A path (outermost first) from its outermost frame `--function` names
    /// on; `None` when no frame of it does.
    pub fn cut(&self, file: &DataFile, keys: Vec<FrameKey>) -> Option<Vec<FrameKey>> {
        if self.function.is_none() {
            return Some(keys);
        }
        let at = keys.iter().position(|&k| self.matches(file, k))?;
        Some(keys[at..].to_vec())
    }

    /// A sample's frames as [`crate::sample_keys`] gives them, cut as
    /// [`Self::cut`] says.
    pub fn sample_keys(&self, file: &DataFile, stack: Option<StackId>) -> Option<Vec<FrameKey>> {
        self.cut(file, crate::sample_keys(file, stack))
    }

    /// Whether a sample is exported: its thread, its time and (with
    /// `--function`) a frame of its stack selected.
    pub fn wants_sample(&self, file: &DataFile, s: &Sample) -> bool {
        self.wants_thread(s.key())
            && self.in_window(s.ts)
            && !lapse_data::is_paused(&file.paused, s.ts)
            && self.stack_matches(file, s.stack)
    }

    /// Whether a sampled stack has a frame `--function` names (any without it).
    fn stack_matches(&self, file: &DataFile, stack: Option<StackId>) -> bool {
        if self.function.is_none() {
            return true;
        }
        match stack {
            Some(s) => self
                .stack_matches
                .get(s.0 as usize)
                .copied()
                .unwrap_or(false),
            None => self.matches(file, FrameKey::Unknown),
        }
    }

    /// Whether an off-CPU period is exported: as a sample switched out at its start.
    pub fn wants_off_cpu(&self, file: &DataFile, p: &OffCpuPeriod) -> bool {
        self.wants_thread(p.key()) && self.in_window(p.from) && self.stack_matches(file, p.stack)
    }

    /// A call tree cut to `--function`'s subtrees (the tree itself without it).
    pub fn tree<'a, W: Weight>(
        &self,
        file: &DataFile,
        tree: &'a CallTree<W>,
    ) -> Cow<'a, CallTree<W>> {
        if self.function.is_none() {
            return Cow::Borrowed(tree);
        }
        Cow::Owned(tree.subtrees(|k| self.matches(file, k)))
    }

    /// Whether timelines need [`StepFilter`] at all.
    fn filters_steps(&self) -> bool {
        self.window.is_some() || self.function.is_some() || self.min_duration_ns > 0
    }
}

/// How a frame of a walked thread is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shown {
    /// Opened before `--from`: decided when the window starts.
    Waiting,
    /// Outside `--function`'s subtrees.
    Hidden,
    /// Open event written.
    Written,
    /// Not yet known to last `--min-duration`; holds the application
    /// nanoseconds its open event would carry.
    Pending(u64),
}

#[derive(Clone, Copy, Debug)]
struct Frame {
    function: FunctionId,
    open: Moment,
    in_subtree: bool,
    shown: Shown,
}

/// A thread's opens and closes, as the [`Selection`] keeps them: only
/// calls inside the window (cut to it), at or below a `--function` frame,
/// lasting at least `--min-duration` (a shorter call's open and close are
/// left out, its time stays with its parent, as uftrace's `-t` does). The
/// application nanoseconds of steps left out go to the next step written,
/// so they add up to the same per thread. Writes the steps it keeps in
/// time order: a call is written once it is known to last long enough
/// (its open event then carries its own time), and its parent before it.
pub struct StepFilter<'s> {
    sel: &'s Selection,
    stack: Vec<Frame>,
    /// Application nanoseconds of steps left out, for the next one written.
    carried: u64,
    /// Frames below this index are not pending (the stack is hidden
    /// frames, then written ones, then pending ones), so a flush looks at
    /// pending frames only, not at the whole stack each step.
    settled: usize,
    /// Before `--from`.
    waiting: bool,
    /// After `--to`: nothing more is written.
    done: bool,
}

impl<'s> StepFilter<'s> {
    pub fn new(sel: &'s Selection) -> StepFilter<'s> {
        StepFilter {
            sel,
            stack: Vec::new(),
            carried: 0,
            settled: 0,
            waiting: sel.window.is_some(),
            done: false,
        }
    }

    /// Takes the walk's next step, writing with `f` what is kept.
    pub fn step<E>(
        &mut self,
        m: Moment,
        step: Step,
        f: &mut impl FnMut(Moment, Step) -> Result<(), E>,
    ) -> Result<(), E> {
        if !self.sel.filters_steps() {
            return f(m, step);
        }
        if self.done {
            return Ok(());
        }
        if let Some((from, to)) = self.sel.window {
            // (compensated time of a raw instant, as the step's own shift)
            let shifted = |raw: Timestamp| Moment {
                at: Timestamp::from_nanos(raw.as_nanos().saturating_sub(m.raw.since(m.at))),
                raw,
                application_ns: 0,
            };
            if self.waiting && m.raw >= from {
                self.waiting = false;
                self.carried = 0;
                let at_from = shifted(from);
                for i in 0..self.stack.len() {
                    self.stack[i].open = at_from;
                    self.decide(i, f)?;
                }
            }
            if m.raw > to {
                self.done = true;
                let end = shifted(to);
                self.flush(end.at, f)?;
                self.settled = 0;
                while let Some(frame) = self.stack.pop() {
                    if frame.shown == Shown::Written {
                        f(end, Step::Close(frame.function))?;
                    }
                }
                return Ok(());
            }
        }
        if self.waiting {
            match step {
                Step::Open(function) => self.stack.push(Frame {
                    function,
                    open: m,
                    in_subtree: false,
                    shown: Shown::Waiting,
                }),
                Step::Close(_) => {
                    self.pop();
                }
                Step::End => {}
            }
            return Ok(());
        }
        self.flush(m.at, f)?;
        match step {
            Step::Open(function) => {
                self.stack.push(Frame {
                    function,
                    open: m,
                    in_subtree: false,
                    shown: Shown::Waiting,
                });
                self.decide(self.stack.len() - 1, f)
            }
            Step::Close(_) => match self.pop() {
                Some(Shown::Written) => self.write(m, step, f),
                Some(Shown::Pending(app)) => {
                    // shorter than --min-duration: its time stays with its parent
                    self.carried += app + m.application_ns;
                    Ok(())
                }
                _ => {
                    self.carried += m.application_ns;
                    Ok(())
                }
            },
            Step::End => self.write(m, step, f),
        }
    }

    /// Settles how the frame at `i` (just opened, or open when the window
    /// starts) is shown.
    fn decide<E>(
        &mut self,
        i: usize,
        f: &mut impl FnMut(Moment, Step) -> Result<(), E>,
    ) -> Result<(), E> {
        let parent = i.checked_sub(1).map(|p| self.stack[p]);
        let frame = self.stack[i];
        let in_subtree =
            parent.is_some_and(|p| p.in_subtree) || self.sel.function_matches(frame.function);
        let shown = if !in_subtree {
            self.carried += frame.open.application_ns;
            Shown::Hidden
        } else if self.sel.min_duration_ns > 0 {
            let app = std::mem::take(&mut self.carried) + frame.open.application_ns;
            Shown::Pending(app)
        } else {
            self.write(frame.open, Step::Open(frame.function), f)?;
            Shown::Written
        };
        self.stack[i].in_subtree = in_subtree;
        self.stack[i].shown = shown;
        if self.settled == i && !matches!(shown, Shown::Pending(_)) {
            self.settled = i + 1;
        }
        Ok(())
    }

    /// How the innermost frame, now closed, was shown.
    fn pop(&mut self) -> Option<Shown> {
        let frame = self.stack.pop()?;
        self.settled = self.settled.min(self.stack.len());
        Some(frame.shown)
    }

    /// Writes the opens of pending calls that have lasted `--min-duration`
    /// by `now`, outermost first.
    fn flush<E>(
        &mut self,
        now: Timestamp,
        f: &mut impl FnMut(Moment, Step) -> Result<(), E>,
    ) -> Result<(), E> {
        let min = self.sel.min_duration_ns;
        while let Some(frame) = self.stack.get_mut(self.settled) {
            if let Shown::Pending(app) = frame.shown {
                if now.since(frame.open.at) < min {
                    // (an inner call opened later still)
                    break;
                }
                let open = Moment {
                    application_ns: app,
                    ..frame.open
                };
                f(open, Step::Open(frame.function))?;
                frame.shown = Shown::Written;
            }
            self.settled += 1;
        }
        Ok(())
    }

    fn write<E>(
        &mut self,
        m: Moment,
        step: Step,
        f: &mut impl FnMut(Moment, Step) -> Result<(), E>,
    ) -> Result<(), E> {
        let m = Moment {
            application_ns: m.application_ns + std::mem::take(&mut self.carried),
            ..m
        };
        f(m, step)
    }
}
