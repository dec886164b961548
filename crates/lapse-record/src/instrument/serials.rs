//! Which use of its thread id each thread is (#31 item 16). The kernel hands
//! thread ids out again once it reaches pid_max, so a program that makes
//! tens of thousands of threads has two at different times under one id;
//! they are two threads of the file ([`ThreadKey::serial`]), not one.
//!
//! The recorder follows threads by the kernel's (pid, tid) alone: at most
//! one thread has an id at a time, and a thread's state is let go some time
//! after it ends (`wrapup.rs`). The serial is the number of threads with
//! the id let go before, so the output stamps it on everything it writes
//! of a thread, and it steps when the thread is let go: what the recorder
//! writes of the id afterwards is the next thread's.
//!
//! Not told apart: a thread whose id is used again before the recorder let
//! its first thread go (about half a second after it ended; the kernel
//! would have to run through pid_max ids in that time: docs/semantics.md,
//! "Many threads", says why it is not let go when the new thread begins),
//! and a process id used again (process rows are by pid).
//!
//! Sampling (`sample/session.rs`) keeps one too: each thread takes its id's
//! serial when it begins, and an ended thread is also let go when the
//! kernel says a thread with its id began.

use lapse_data::ThreadKey;

/// The serial of every thread id: one `u16` a thread id, made at the first
/// thread let go (the kernel's ids are below 2^22: 8 MiB of address space,
/// of which only the pages of ids in use are ever touched, 4 KiB for each
/// 2,048 ids). A count past `u16::MAX` stays there (that id's later threads
/// are one thread again: 65,535 × pid_max threads on).
#[derive(Default)]
pub struct ThreadSerials(Vec<u16>);

impl ThreadSerials {
    const IDS: usize = 1 << 22;

    /// `thread` as the use of its id that has it now.
    pub fn of(&self, thread: ThreadKey) -> ThreadKey {
        let serial = self
            .0
            .get(thread.tid as usize % Self::IDS)
            .copied()
            .unwrap_or(0);
        ThreadKey::reused(thread.pid, thread.tid, serial)
    }

    /// The thread with id `tid` was let go: a later thread with the id is
    /// another thread.
    pub fn let_go(&mut self, tid: u32) {
        if self.0.is_empty() {
            // (zeroed memory: the pages come as ids are let go)
            self.0 = vec![0; Self::IDS];
        }
        let s = &mut self.0[tid as usize % Self::IDS];
        *s = s.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_id_let_go_is_a_new_thread_when_it_comes_again() {
        let mut s = ThreadSerials::default();
        let first = ThreadKey::new(10, 11);
        assert_eq!(s.of(first), first);
        s.let_go(11);
        // The id's second thread, in the same process or another one; other
        // ids are untouched.
        assert_eq!(s.of(first), ThreadKey::reused(10, 11, 1));
        assert_eq!(s.of(ThreadKey::new(20, 11)), ThreadKey::reused(20, 11, 1));
        assert_eq!(s.of(ThreadKey::new(10, 12)), ThreadKey::new(10, 12));
        s.let_go(11);
        assert_eq!(s.of(first).serial, 2);
        // The count stops at the top instead of wrapping to 0.
        s.0[11] = u16::MAX;
        s.let_go(11);
        assert_eq!(s.of(first).serial, u16::MAX);
    }
}
