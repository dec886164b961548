//! The recorder's end of the runtime's transport: a listening SOCK_SEQPACKET
//! socket in the session's temporary directory, and the connections of the
//! target's process images, each with what the session knows of it. The
//! socket calls are [`crate::linux::socket`]'s; everything is non-blocking
//! and the main loop polls.

use std::cell::Cell;
use std::io;
use std::os::fd::RawFd;
use std::path::Path;

use lapse_data::Timestamp;
use lapse_rt::protocol::MAX_DATAGRAM;

use crate::linux::socket::{Received, SeqpacketConn, SeqpacketListener};

pub use crate::linux::poll::{readable_within, wait_readable};
pub use crate::linux::socket::Recv;

pub struct Listener {
    socket: SeqpacketListener,
    accepted: Cell<u64>,
}

pub struct Conn {
    socket: SeqpacketConn,
    /// Unique for the session (fd numbers are reused).
    pub id: u64,
    /// The last read found nothing more queued.
    pub drained: bool,
    /// When the last read that found nothing more queued began: every
    /// datagram sent before then has been read.
    pub emptied_at: Timestamp,
    /// The latest time a datagram read on it was sent after, by its
    /// sender's clock reading (less the conversion's margin): every
    /// datagram sent before then has been read too (a socket keeps its
    /// datagrams in the order they were sent).
    pub stamped_at: Timestamp,
    /// Processes that have sent on this connection (fork children share it).
    pub pids: Vec<u32>,
}

impl Conn {
    /// A time before which everything sent on this connection has been
    /// read: the last read that found it empty began then, or a datagram
    /// sent after then was read. With a backlog the connection is never
    /// found empty, but the stamps go on.
    pub fn read_through(&self) -> Timestamp {
        self.emptied_at.max(self.stamped_at)
    }
}

impl Listener {
    pub fn bind(path: &Path) -> io::Result<Listener> {
        Ok(Listener {
            socket: SeqpacketListener::bind(path)?,
            accepted: Cell::new(0),
        })
    }

    pub fn raw_fd(&self) -> RawFd {
        self.socket.raw_fd()
    }

    /// A pending connection, if any.
    pub fn accept(&self) -> io::Result<Option<Conn>> {
        let Some(socket) = self.socket.accept()? else {
            return Ok(None);
        };
        self.accepted.set(self.accepted.get() + 1);
        Ok(Some(Conn {
            socket,
            id: self.accepted.get(),
            drained: false,
            emptied_at: Timestamp::from_nanos(0),
            stamped_at: Timestamp::from_nanos(0),
            pids: Vec::new(),
        }))
    }
}

impl Conn {
    pub fn raw_fd(&self) -> RawFd {
        self.socket.raw_fd()
    }

    /// Receives one datagram into `buf` (at least [`MAX_DATAGRAM`] long),
    /// with the memfd that came with it, if any, and its sender's pid.
    pub fn recv_with_fd(&self, buf: &mut [u8]) -> io::Result<Received> {
        debug_assert!(buf.len() >= MAX_DATAGRAM);
        self.socket.recv_with_fd(buf)
    }
}
