//! Processes whose events did not all reach the recorder the usual way:
//! those that ran without lapse's runtime, and those whose connection
//! closed while they lived on. The session counts them as it goes; the
//! wrap-up names them in the notes.

use super::arena::Arena;

/// Processes the kernel saw that never said hello: lapse's runtime was not
/// in them (a set-user-ID or statically linked program, or an image exec'd
/// after a privilege drop that left the runtime unreadable), so their calls
/// are not in the recording.
#[derive(Default)]
pub(super) struct WithoutRuntime {
    count: u64,
    /// The first few, to name them.
    first: Vec<u32>,
}

impl WithoutRuntime {
    const NAMED: usize = 8;

    pub(super) fn note(&mut self, pid: u32) {
        self.count += 1;
        if self.first.len() < Self::NAMED {
            self.first.push(pid);
        }
    }

    pub(super) fn note_text(&self) -> Option<String> {
        if self.count == 0 {
            return None;
        }
        let pids: Vec<String> = self.first.iter().map(u32::to_string).collect();
        let more = if self.count > self.first.len() as u64 {
            ", ..."
        } else {
            ""
        };
        Some(format!(
            "{} process(es) ran without lapse's runtime, so their calls are not recorded (pid {}{more}): set-user-ID or statically linked programs, or programs exec'd after a privilege drop that left the runtime unreadable",
            self.count,
            pids.join(", ")
        ))
    }
}

/// Processes whose connection to the recorder closed while they lived on
/// (the program closed every descriptor, a seccomp filter forbids sendmsg):
/// their events came through their arena alone, and those that found no
/// room there are lost.
#[derive(Default)]
pub(super) struct CutOff {
    count: u64,
    /// Of those, the processes whose connection did close (the others
    /// only had events no buffer took while the recorder fell behind).
    cut: u64,
    /// The first few, with why the runtime could not connect again.
    first: Vec<(u32, Option<i32>)>,
    pub(super) undelivered: u64,
}

impl CutOff {
    const NAMED: usize = 8;

    /// Arena `arena` of process `pid` is let go: its lost events count.
    pub(super) fn note(&mut self, pid: u32, arena: &Arena, lost: &mut u64) {
        let undelivered = arena.undelivered();
        *lost = lost.saturating_add(undelivered);
        self.undelivered = self.undelivered.saturating_add(undelivered);
        if !arena.carried_a_cut() && undelivered == 0 {
            return;
        }
        let errno = arena.cut_errno();
        match self.first.iter_mut().find(|(p, _)| *p == pid) {
            Some(seen) => seen.1 = seen.1.or(errno),
            None => {
                self.count += 1;
                self.cut += u64::from(arena.carried_a_cut());
                if self.first.len() < Self::NAMED {
                    self.first.push((pid, errno));
                }
            }
        }
    }

    pub(super) fn note_text(&self) -> Option<String> {
        if self.count == 0 {
            return None;
        }
        let pids: Vec<String> = self
            .first
            .iter()
            .map(|(pid, errno)| match errno {
                Some(e) => format!("{pid} ({})", std::io::Error::from_raw_os_error(*e)),
                None => pid.to_string(),
            })
            .collect();
        let more = if self.count > self.first.len() as u64 {
            ", ..."
        } else {
            ""
        };
        let lost = match self.undelivered {
            0 => String::new(),
            n => format!("; {n} events found no room there and are lost"),
        };
        if self.cut == 0 {
            // (connected all along: the recorder fell behind, the shared
            // buffers were full and sending timed out)
            return Some(format!(
                "{} events of {} process(es) (pid {}{more}) found no free buffer and could not be sent while the recorder fell behind: they are lost",
                self.undelivered,
                self.count,
                pids.join(", "),
            ));
        }
        Some(format!(
            "{} process(es) lost their connection to lapse and could not open another (pid {}{more}): their events came through shared memory{lost}",
            self.count,
            pids.join(", "),
        ))
    }
}
