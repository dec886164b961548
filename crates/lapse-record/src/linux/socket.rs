//! Unix SOCK_SEQPACKET sockets behind safe calls: a listener bound to a
//! path (0600, senders' credentials passed), its accepted connections
//! (large receive buffer), and a receive that takes the descriptor
//! (SCM_RIGHTS) and the sender's pid (SCM_CREDENTIALS) that came with a
//! datagram. Everything is non-blocking; callers poll ([`super::poll`]).
//! What the datagrams mean is the caller's business.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

/// Receive buffer asked of the kernel per connection, to absorb bursts.
const RCVBUF_BYTES: i32 = 8 << 20;

/// A listening socket.
pub struct SeqpacketListener {
    fd: OwnedFd,
}

/// One accepted connection.
pub struct SeqpacketConn {
    fd: OwnedFd,
}

/// What one `recv` on a connection gave.
pub enum Recv {
    Datagram(usize),
    WouldBlock,
    Closed,
}

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

impl SeqpacketListener {
    /// Binds and listens at `path` (made 0600), with SO_PASSCRED on.
    pub fn bind(path: &Path) -> io::Result<SeqpacketListener> {
        use std::os::unix::ffi::OsStrExt;
        let bytes = path.as_os_str().as_bytes();
        // SAFETY: sockaddr_un is plain old data.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        if bytes.len() >= addr.sun_path.len() {
            return Err(io::Error::other("socket path too long"));
        }
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
            *d = *s as libc::c_char;
        }
        // SAFETY: plain socket calls on a fd we own; addr is initialised.
        unsafe {
            let fd = cvt(libc::socket(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                0,
            ))?;
            let fd = OwnedFd::from_raw_fd(fd);
            cvt(libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
            ))?;
            // Each datagram then comes with its sender's process id as
            // this process sees it (accepted connections inherit this):
            // what a runtime in another PID namespace cannot tell itself.
            let on: libc::c_int = 1;
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PASSCRED,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
            cvt(libc::listen(fd.as_raw_fd(), 128))?;
            // (in a 0700 directory already; the socket itself is ours alone too)
            std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
            Ok(SeqpacketListener { fd })
        }
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// A pending connection, if any.
    pub fn accept(&self) -> io::Result<Option<SeqpacketConn>> {
        // SAFETY: accept4 on our listening socket; no address wanted.
        let rc = unsafe {
            libc::accept4(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) | Some(libc::ECONNABORTED) => Ok(None),
                _ => Err(e),
            };
        }
        // SAFETY: rc is a new fd that we own.
        let fd = unsafe { OwnedFd::from_raw_fd(rc) };
        for (opt, val) in [
            (libc::SO_RCVBUFFORCE, RCVBUF_BYTES),
            (libc::SO_RCVBUF, RCVBUF_BYTES),
        ] {
            // SAFETY: setting an int socket option; failure is harmless.
            let ok = unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    opt,
                    (&val as *const i32).cast(),
                    std::mem::size_of::<i32>() as libc::socklen_t,
                )
            };
            if ok == 0 {
                break;
            }
        }
        Ok(Some(SeqpacketConn { fd }))
    }
}

impl SeqpacketConn {
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Receives one datagram into `buf` (longer than any datagram sent, or
    /// it is cut), the file descriptor that came with it (SCM_RIGHTS), if
    /// any, and its sender's process id as this process sees it
    /// (SCM_CREDENTIALS).
    pub fn recv_with_fd(&self, buf: &mut [u8]) -> io::Result<Received> {
        // Room for the sender's credentials and a few descriptors: more
        // than one is not expected, but any that come must be closed, not
        // leaked.
        let mut ctl = [0u64; 16];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: msghdr is plain old data; every pointer in it is valid for
        // the lengths given.
        let mut mh: libc::msghdr = unsafe { std::mem::zeroed() };
        mh.msg_iov = &mut iov;
        mh.msg_iovlen = 1;
        mh.msg_control = ctl.as_mut_ptr().cast();
        mh.msg_controllen = std::mem::size_of_val(&ctl) as _;
        // SAFETY: recvmsg into the buffers described above.
        let n = unsafe {
            libc::recvmsg(
                self.fd.as_raw_fd(),
                &mut mh,
                libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(Received::nothing(Recv::WouldBlock)),
                Some(libc::ECONNRESET) => Ok(Received::nothing(Recv::Closed)),
                _ => Err(e),
            };
        }
        let mut fd = None;
        let mut sender_pid = None;
        // SAFETY: walking the control messages recvmsg filled in; an
        // SCM_RIGHTS payload is an array of descriptors now ours.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&mh);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(c).cast::<i32>();
                    let len = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                    for k in 0..len / std::mem::size_of::<i32>() {
                        let got = OwnedFd::from_raw_fd(data.add(k).read_unaligned());
                        if fd.is_none() {
                            fd = Some(got);
                        } // (others drop here, closed)
                    }
                }
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_CREDENTIALS {
                    let cred = libc::CMSG_DATA(c).cast::<libc::ucred>().read_unaligned();
                    sender_pid = u32::try_from(cred.pid).ok();
                }
                c = libc::CMSG_NXTHDR(&mh, c);
            }
        }
        let recv = if n == 0 {
            Recv::Closed
        } else {
            Recv::Datagram(n as usize)
        };
        Ok(Received {
            recv,
            fd,
            sender_pid,
        })
    }
}

/// What [`SeqpacketConn::recv_with_fd`] got.
pub struct Received {
    pub recv: Recv,
    pub fd: Option<OwnedFd>,
    /// The sending process, as this process's PID namespace numbers it.
    pub sender_pid: Option<u32>,
}

impl Received {
    fn nothing(recv: Recv) -> Received {
        Received {
            recv,
            fd: None,
            sender_pid: None,
        }
    }
}
