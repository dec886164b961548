//! What the recorder tells its caller while it records. The library prints
//! nothing: each notice goes to the caller's [`Notices`] sink as it happens
//! (some matter while the target still runs: a full disk, a refused
//! syscall tracepoint). The `lapse` command writes each as one line.

use std::fmt;
use std::sync::Arc;

/// One thing worth saying about a recording that goes on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    /// How `--method auto` chose, where the choice may surprise.
    Method(String),
    /// Something is missing or may be off; the recording goes on.
    Warning(String),
    /// Writing the data file failed: recording stopped there, and the
    /// target is supervised to its end.
    WriteFailed(String),
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Notice::Method(text) => f.write_str(text),
            Notice::Warning(text) => write!(f, "warning: {text}"),
            Notice::WriteFailed(text) => f.write_str(text),
        }
    }
}

/// The caller's function that takes each notice.
type Sink = Arc<dyn Fn(&Notice) + Send + Sync>;

/// Where notices go: a function of the caller's, or nowhere (the default).
#[derive(Clone, Default)]
pub struct Notices(Option<Sink>);

impl Notices {
    /// Notices go to `sink`, as they happen.
    pub fn to(sink: impl Fn(&Notice) + Send + Sync + 'static) -> Notices {
        Notices(Some(Arc::new(sink)))
    }

    pub(crate) fn say(&self, notice: Notice) {
        if let Some(sink) = &self.0 {
            sink(&notice);
        }
    }
}

impl fmt::Debug for Notices {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Notices(sink)"
        } else {
            "Notices(none)"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn notices_reach_the_sink_in_order_and_none_is_silent() {
        let heard = Arc::new(Mutex::new(Vec::new()));
        let h = Arc::clone(&heard);
        let notices = Notices::to(move |n| h.lock().unwrap().push(n.to_string()));
        notices.say(Notice::Warning("a".into()));
        notices.say(Notice::Method("b".into()));
        assert_eq!(*heard.lock().unwrap(), ["warning: a", "b"]);
        Notices::default().say(Notice::Warning("nobody hears this".into()));
    }
}
