//! Process and thread ids of runtimes in another PID namespace (`unshare
//! -p`, containers). A runtime there knows only its namespace's ids (its
//! process may be pid 1), while the kernel's records (context switches,
//! mappings) and /proc use the recorder's. Each datagram comes with its
//! sender's process id as the recorder sees it (SO_PASSCRED on the socket);
//! a connection's processes are learnt from that, and their threads from
//! the `NSpid` lines of /proc. Runtimes in the recorder's own namespace cost
//! one comparison a datagram.

use std::collections::HashMap;

use crate::linux::proc_scan;

#[derive(Default)]
pub struct NsIds {
    /// (connection, the runtime's pid) → the pid here, for the pids that differ.
    pids: HashMap<(u64, u32), u32>,
    /// For each process here whose ids differ: the runtime's tid → the tid here.
    tids: HashMap<u32, HashMap<u32, u32>>,
}

impl NsIds {
    /// A datagram on connection `conn` from the runtime's `pid`, sent by
    /// process `here` (as the kernel said, when it did).
    pub fn learn(&mut self, conn: u64, pid: u32, here: Option<u32>) {
        if let Some(here) = here.filter(|&h| h != pid && h != 0) {
            self.pids.insert((conn, pid), here);
            let tids = self.tids.entry(here).or_insert_with(|| {
                // Its threads alive now (begun before this was known);
                // later ones are read as they begin.
                proc_scan::namespace_tids(here).into_iter().collect()
            });
            // (a process's main thread has its process's id)
            tids.insert(pid, here);
        }
    }

    /// The pid here of the runtime's `pid` on connection `conn`.
    pub fn pid(&self, conn: u64, pid: u32) -> u32 {
        if self.pids.is_empty() {
            return pid;
        }
        self.pids.get(&(conn, pid)).copied().unwrap_or(pid)
    }

    /// The tid here of thread `tid` (the runtime's) of process `pid` (here).
    pub fn tid(&mut self, pid: u32, tid: u32) -> u32 {
        let Some(tids) = self.tids.get_mut(&pid) else {
            return tid;
        };
        if let Some(&t) = tids.get(&tid) {
            return t;
        }
        tids.extend(proc_scan::namespace_tids(pid));
        // (a thread gone before it was looked up keeps the runtime's id:
        // its calls stay its own, only its off-CPU time is not matched)
        tids.get(&tid).copied().unwrap_or(tid)
    }

    /// Thread `tid` of process `pid` (both here) began: while it lives,
    /// its id in the runtime's namespace can be read, so it is now (a
    /// thread that sleeps and ends before its first events arrive would
    /// otherwise be gone by then).
    pub fn thread_began(&mut self, pid: u32, tid: u32) {
        if let Some(tids) = self.tids.get_mut(&pid) {
            if let Some(inner) = proc_scan::namespace_tid(pid, tid) {
                tids.insert(inner, tid);
            }
        }
    }

    /// True while no runtime in another namespace is known.
    pub fn is_empty(&self) -> bool {
        self.tids.is_empty()
    }

    /// Forgets process `pid` (here), once it is let go.
    pub fn forget(&mut self, pid: u32) {
        if self.tids.remove(&pid).is_some() {
            self.pids.retain(|_, &mut here| here != pid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_of_another_namespace_are_mapped_and_our_own_pass_through() {
        let mut ns = NsIds::default();
        ns.learn(1, 4000, Some(4000));
        assert_eq!((ns.pid(1, 4000), ns.tid(4000, 4001)), (4000, 4001));
        // A runtime that is pid 1 in its namespace and 777 here.
        ns.learn(2, 1, Some(777));
        assert_eq!(ns.pid(2, 1), 777);
        assert_eq!(ns.tid(777, 1), 777, "its main thread");
        // pid 1 on another connection is another namespace's: not mapped.
        assert_eq!(ns.pid(3, 1), 1);
        ns.forget(777);
        assert_eq!(ns.pid(2, 1), 1);
    }
}
