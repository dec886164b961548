//! Pause, resume and marks, the same for both methods: the runtime's
//! variables that `--start-paused`, `--delay` and `--signal` become, and
//! the record a `CONTROL` datagram from the program makes.

use lapse_data::{ControlEvent, Mark, Timestamp, Toggle};
use lapse_rt::protocol::{self, Control};

use crate::linux::clock;
use crate::ControlOptions;

impl ControlOptions {
    /// The runtime's variables for these options, and the instant a
    /// `--delay` ends (on the monotonic clock, the timeline's, so the
    /// runtime resumes at the instant the file says).
    pub(crate) fn runtime_env(&self) -> (Vec<(String, String)>, Option<Timestamp>) {
        let resume_at = self.delay.map(|d| {
            Timestamp::from_nanos(clock::monotonic_now().as_nanos() + d.as_nanos() as u64)
        });
        let mut env = Vec::new();
        if self.start_paused || resume_at.is_some() {
            env.push((protocol::ENV_PAUSED.to_owned(), "1".to_owned()));
        }
        if let (Some(at), false) = (resume_at, self.start_paused) {
            env.push((
                protocol::ENV_RESUME_NS.to_owned(),
                at.as_nanos().to_string(),
            ));
        }
        if let Some(sig) = self.signal {
            env.push((protocol::ENV_SIGNAL.to_owned(), sig.to_string()));
        }
        (env, resume_at)
    }
}

/// What thread (`pid`, `tid`) said at `at`: a pause, a resume or a mark
/// with `text`; `None` for a program that took the toggle signal for its
/// own handler, which is about the program, not its timeline.
pub(crate) fn event(
    op: Control,
    pid: u32,
    tid: u32,
    at: Timestamp,
    text: &[u8],
) -> Option<ControlEvent> {
    let toggle = Toggle { pid, tid, at };
    Some(match op {
        Control::Pause => ControlEvent::Pause(toggle),
        Control::Resume => ControlEvent::Resume(toggle),
        Control::Mark => ControlEvent::Mark(Mark {
            pid,
            tid,
            at,
            text: String::from_utf8_lossy(text).into_owned(),
        }),
        Control::SignalTaken => return None,
    })
}
