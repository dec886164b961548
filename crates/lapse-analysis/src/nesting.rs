//! The one stack repair: how a thread's exits close its open calls when
//! they do not nest (SPEC 8: "exits that match no entry are repaired and
//! counted"). The analysis, the timeline exports and the Chrome importer all
//! follow a thread's calls with a [`CallStack`], so they agree on every
//! repair.
//!
//! Rules:
//! - an exit matching the top frame closes it ([`Closed::Returned`]);
//! - an exit matching a frame further down (longjmp, an exception, lost
//!   exits) first closes every frame above it ([`Closed::Skipped`]), then
//!   the matching one;
//! - an exit matching no frame changes nothing ([`Exit::Unmatched`]);
//! - an unwind event (the recorder found the frame below the stack pointer:
//!   a longjmp, an exception through code without exit probes) closes the
//!   innermost frame of its function, and any above it, at that moment
//!   ([`Closed::Unwound`]);
//! - at the thread's end the frames still open are closed innermost first
//!   ([`Closed::ThreadEnd`]).
//!
//! The stack counts the open frames of each function, so an exit or an
//! unwind of a function with none open is known to match nothing without a
//! search: a crafted file of a deep stack and many such events costs time
//! in proportion to its events, not to their product. The counts are kept
//! (all zero) from one thread to the next: reuse one stack for a file's
//! threads, so that a function id makes room once, not once a thread.

use lapse_data::FunctionId;

/// What a frame on a [`CallStack`] must tell: whose call it is.
pub trait StackFrame {
    fn function(&self) -> FunctionId;
}

impl StackFrame for FunctionId {
    #[inline(always)]
    fn function(&self) -> FunctionId {
        *self
    }
}

/// How a frame was closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closed {
    /// By its own exit.
    Returned,
    /// By the exit of a frame further down (its own exit never came).
    Skipped,
    /// Found gone before its exit came (an unwind event): its frame was
    /// below the stack pointer of a later event.
    Unwound,
    /// Still open when its thread ended.
    ThreadEnd,
}

/// What an exit did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// It closed the top frame.
    Returned,
    /// It closed a frame further down, after this many frames above it.
    Repaired(usize),
    /// No open frame is of that function: nothing was closed.
    Unmatched,
}

/// A thread's open calls, outermost first.
#[derive(Clone, Debug)]
pub struct CallStack<F> {
    frames: Vec<F>,
    /// Open frames of each function, by id (as long as the largest id
    /// pushed so far).
    open: Vec<u32>,
}

impl<F> Default for CallStack<F> {
    fn default() -> Self {
        CallStack {
            frames: Vec::new(),
            open: Vec::new(),
        }
    }
}

impl<F: StackFrame> CallStack<F> {
    #[inline(always)]
    pub fn push(&mut self, frame: F) {
        let function = frame.function();
        self.push_new(function, |_| frame);
    }

    /// Pushes the frame `make` makes for a new call of `function`, told how
    /// many frames of the function are open below it.
    #[inline(always)]
    pub fn push_new(&mut self, function: FunctionId, make: impl FnOnce(u32) -> F) {
        let i = function.0 as usize;
        let before = match self.open.get_mut(i) {
            Some(open) => {
                let before = *open;
                *open = before + 1;
                before
            }
            None => self.grow(i),
        };
        self.frames.push(make(before));
    }

    /// Makes room for function `i`, whose first frame this is.
    #[cold]
    #[inline(never)]
    fn grow(&mut self, i: usize) -> u32 {
        self.open.resize(i + 1, 0);
        self.open[i] = 1;
        0
    }

    /// Takes the top frame off (every frame leaves through here).
    #[inline(always)]
    fn take_top(&mut self) -> Option<F> {
        let f = self.frames.pop()?;
        let i = f.function().0 as usize;
        let open = self.open.as_mut_slice();
        if i < open.len() {
            open[i] -= 1;
        }
        Some(f)
    }

    /// How many frames of `function` are open.
    #[inline(always)]
    pub fn open_frames_of(&self, function: FunctionId) -> u32 {
        self.open.get(function.0 as usize).copied().unwrap_or(0)
    }

    #[inline(always)]
    pub fn top(&self) -> Option<&F> {
        self.frames.last()
    }

    #[inline(always)]
    pub fn top_mut(&mut self) -> Option<&mut F> {
        self.frames.last_mut()
    }

    pub fn len(&self) -> usize {
        self.frames.len()
    }

    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// The open frames, outermost first.
    pub fn frames(&self) -> &[F] {
        &self.frames
    }

    /// Applies an exit of `function`, calling `close` for every frame it
    /// closes, innermost first.
    #[inline(always)]
    pub fn exit(&mut self, function: FunctionId, mut close: impl FnMut(F, Closed)) -> Exit {
        match self.frames.last() {
            Some(top) if top.function() == function => {
                // (counted down by the id in hand, not read back from the
                // frame taken off: the common case, kept short)
                if let Some(n) = self.open.get_mut(function.0 as usize) {
                    *n -= 1;
                }
                if let Some(f) = self.frames.pop() {
                    close(f, Closed::Returned);
                }
                Exit::Returned
            }
            _ if self.open_frames_of(function) == 0 => Exit::Unmatched,
            _ => self.exit_below(function, close),
        }
    }

    #[inline(never)]
    fn exit_below(&mut self, function: FunctionId, close: impl FnMut(F, Closed)) -> Exit {
        self.exit_where(|f| f.function() == function, close)
    }

    /// Applies an exit that closes the innermost frame `matches` accepts
    /// (as [`CallStack::exit`] does for a function), e.g. a Chrome trace's
    /// `E` event, which names its event but not its category.
    pub fn exit_where(
        &mut self,
        matches: impl Fn(&F) -> bool,
        mut close: impl FnMut(F, Closed),
    ) -> Exit {
        let Some(pos) = self.frames.iter().rposition(matches) else {
            return Exit::Unmatched;
        };
        let skipped = self.frames.len() - pos - 1;
        while self.frames.len() > pos + 1 {
            if let Some(f) = self.take_top() {
                close(f, Closed::Skipped);
            }
        }
        if let Some(f) = self.take_top() {
            close(f, Closed::Returned);
        }
        if skipped == 0 {
            Exit::Returned
        } else {
            Exit::Repaired(skipped)
        }
    }

    /// Applies an unwind event of `function`: its innermost open frame is
    /// gone, and so is every frame above it (the recorder sends them
    /// innermost first, so that is normally the top). All close as
    /// [`Closed::Unwound`]; [`Exit::Repaired`] counts the frames above.
    pub fn unwind(&mut self, function: FunctionId, mut close: impl FnMut(F, Closed)) -> Exit {
        if self.open_frames_of(function) == 0 {
            return Exit::Unmatched;
        }
        let Some(pos) = self.frames.iter().rposition(|f| f.function() == function) else {
            return Exit::Unmatched;
        };
        let above = self.frames.len() - pos - 1;
        while self.frames.len() > pos {
            if let Some(f) = self.take_top() {
                close(f, Closed::Unwound);
            }
        }
        if above == 0 {
            Exit::Returned
        } else {
            Exit::Repaired(above)
        }
    }

    /// Closes the top frame whatever its function (an exit that names none,
    /// as a Chrome trace's `E` without a name); `None` on an empty stack.
    pub fn pop(&mut self) -> Option<F> {
        self.take_top()
    }

    /// Closes every open frame, innermost first, as the thread ends.
    pub fn close_all(&mut self, mut close: impl FnMut(F, Closed)) {
        while let Some(f) = self.take_top() {
            close(f, Closed::ThreadEnd);
        }
    }

    /// Lets every open frame go without closing it (the next thread starts
    /// on an empty stack).
    pub fn clear(&mut self) {
        while self.take_top().is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(n: u32) -> FunctionId {
        FunctionId(n)
    }

    #[test]
    fn an_exit_further_down_closes_the_frames_above_it_first() {
        let mut s = CallStack::default();
        for n in [1, 2, 3, 4] {
            s.push(f(n));
        }
        let mut closed = Vec::new();
        let r = s.exit(f(2), |g, how| closed.push((g.0, how)));
        assert_eq!(r, Exit::Repaired(2));
        assert_eq!(
            closed,
            [
                (4, Closed::Skipped),
                (3, Closed::Skipped),
                (2, Closed::Returned)
            ]
        );
        assert_eq!(s.frames(), [f(1)]);
    }

    #[test]
    fn recursion_closes_the_innermost_frame_of_the_function() {
        let mut s = CallStack::default();
        for n in [1, 2, 1, 2] {
            s.push(f(n));
        }
        let mut closed = Vec::new();
        assert_eq!(
            s.exit(f(1), |g, how| closed.push((g.0, how))),
            Exit::Repaired(1)
        );
        assert_eq!(closed, [(2, Closed::Skipped), (1, Closed::Returned)]);
        assert_eq!(s.frames(), [f(1), f(2)]);
    }

    #[test]
    fn an_unwind_closes_its_frame_at_once_and_the_next_call_nests_under_the_caller() {
        // main > foo, foo longjmps to main, main calls bar: the recorder
        // sends "foo unwound" before bar's entry.
        let mut s = CallStack::default();
        s.push(f(1));
        s.push(f(2));
        let mut closed = Vec::new();
        assert_eq!(
            s.unwind(f(2), |g, how| closed.push((g.0, how))),
            Exit::Returned
        );
        s.push(f(3));
        assert_eq!(closed, [(2, Closed::Unwound)]);
        assert_eq!(s.frames(), [f(1), f(3)]);
        assert_eq!(
            s.unwind(f(9), |_, _| panic!("nothing closes")),
            Exit::Unmatched
        );
        // frames above the unwound one go with it
        s.push(f(4));
        closed.clear();
        assert_eq!(
            s.unwind(f(3), |g, how| closed.push((g.0, how))),
            Exit::Repaired(1)
        );
        assert_eq!(closed, [(4, Closed::Unwound), (3, Closed::Unwound)]);
        assert_eq!(s.frames(), [f(1)]);
    }

    #[test]
    fn an_unmatched_exit_changes_nothing_and_the_end_closes_the_rest() {
        let mut s = CallStack::default();
        s.push(f(1));
        s.push(f(2));
        assert_eq!(
            s.exit(f(9), |_, _| panic!("nothing closes")),
            Exit::Unmatched
        );
        let mut closed = Vec::new();
        s.close_all(|g, how| closed.push((g.0, how)));
        assert_eq!(closed, [(2, Closed::ThreadEnd), (1, Closed::ThreadEnd)]);
        assert!(s.is_empty());
    }

    /// A frame that counts how often the stack asks for its function.
    struct Looked(FunctionId, std::rc::Rc<std::cell::Cell<u64>>);

    impl StackFrame for Looked {
        fn function(&self) -> FunctionId {
            self.1.set(self.1.get() + 1);
            self.0
        }
    }

    #[test]
    fn an_exit_or_unwind_of_a_function_with_no_open_frame_searches_nothing() {
        // (a crafted file: a deep stack, then many exits and unwinds of a
        // function never entered; searched each, that is their product)
        let looks = std::rc::Rc::new(std::cell::Cell::new(0));
        let mut s = CallStack::default();
        for _ in 0..10_000 {
            s.push(Looked(f(1), looks.clone()));
        }
        looks.set(0);
        for _ in 0..100 {
            assert_eq!(
                s.exit(f(2), |_, _| panic!("nothing closes")),
                Exit::Unmatched
            );
            assert_eq!(
                s.unwind(f(2), |_, _| panic!("nothing closes")),
                Exit::Unmatched
            );
            // (an id past every one pushed so far)
            assert_eq!(
                s.exit(f(70_000), |_, _| panic!("nothing closes")),
                Exit::Unmatched
            );
        }
        // (only the top frame, once an exit)
        assert!(looks.get() <= 200, "{} frames looked at", looks.get());
        assert_eq!(s.open_frames_of(f(1)), 10_000);
        s.push(Looked(f(2), looks.clone()));
        assert_eq!(s.open_frames_of(f(2)), 1);
        let mut closed = 0;
        assert_eq!(s.exit(f(1), |_, _| closed += 1), Exit::Repaired(1));
        assert_eq!(
            (closed, s.open_frames_of(f(2)), s.open_frames_of(f(1))),
            (2, 0, 9_999)
        );
        s.clear();
        assert!(s.is_empty() && s.open_frames_of(f(1)) == 0);
    }
}
