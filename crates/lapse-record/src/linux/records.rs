//! Parsing the perf records the recorder asks for. Each record is the bytes
//! [`super::perf::PerfEvent::drain`] hands out, header included; with
//! `sample_id_all` every non-sample record ends with a `sample_id` trailer
//! whose layout follows the event's `sample_type` ([`SampleIdLayout`]).

use perf_event_open_sys::bindings as b;

/// Which `sample_id` fields the trailer holds (the order is fixed by the kernel).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleIdLayout {
    sample_type: u64,
}

/// The fields of a `sample_id` trailer we read; absent ones are zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleId {
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    pub cpu: u32,
}

impl SampleIdLayout {
    pub fn new(sample_type: u64) -> Self {
        SampleIdLayout { sample_type }
    }

    fn has(&self, bit: u32) -> bool {
        self.sample_type & u64::from(bit) != 0
    }

    /// Size of the trailer in bytes.
    pub fn len(&self) -> usize {
        [
            b::PERF_SAMPLE_TID,
            b::PERF_SAMPLE_TIME,
            b::PERF_SAMPLE_ID,
            b::PERF_SAMPLE_STREAM_ID,
            b::PERF_SAMPLE_CPU,
            b::PERF_SAMPLE_IDENTIFIER,
        ]
        .iter()
        .filter(|&&bit| self.has(bit))
        .count()
            * 8
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads the trailer at the end of `record`.
    pub fn parse(&self, record: &[u8]) -> Option<SampleId> {
        let mut r = Reader::new(record, record.len().checked_sub(self.len())?);
        let mut id = SampleId::default();
        if self.has(b::PERF_SAMPLE_TID) {
            id.pid = r.u32()?;
            id.tid = r.u32()?;
        }
        if self.has(b::PERF_SAMPLE_TIME) {
            id.time = r.u64()?;
        }
        if self.has(b::PERF_SAMPLE_ID) {
            r.u64()?;
        }
        if self.has(b::PERF_SAMPLE_STREAM_ID) {
            r.u64()?;
        }
        if self.has(b::PERF_SAMPLE_CPU) {
            id.cpu = r.u32()?;
            r.u32()?;
        }
        Some(id)
    }
}

/// The records the recorder acts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PerfRecord<'a> {
    /// The task was switched out (`preempted` when it was still runnable) or in.
    Switch {
        out: bool,
        preempted: bool,
        id: SampleId,
    },
    Fork {
        pid: u32,
        ppid: u32,
        tid: u32,
        ptid: u32,
        time: u64,
    },
    Exit {
        pid: u32,
        ppid: u32,
        tid: u32,
        ptid: u32,
        time: u64,
    },
    /// A thread was named; `exec` when the name changed because of exec.
    Comm {
        pid: u32,
        tid: u32,
        name: String,
        exec: bool,
        id: SampleId,
    },
    Mmap2 {
        pid: u32,
        tid: u32,
        addr: u64,
        len: u64,
        pgoff: u64,
        /// `PROT_*` bits: [`is_executable`].
        prot: u32,
        build_id: Option<&'a [u8]>,
        /// The mapped file's device and inode (when the record carries
        /// them rather than a build-id).
        inode: Option<FileInode>,
        path: String,
        id: SampleId,
    },
    Lost {
        lost: u64,
    },
    /// A sample; its body layout is the sampler's business.
    Sample {
        misc: u16,
        body: &'a [u8],
    },
    Other {
        kind: u32,
    },
}

/// A file's identity on disk: its device and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileInode {
    pub major: u32,
    pub minor: u32,
    pub ino: u64,
}

/// Parses one record (header included). `None` when it is malformed.
pub fn parse<'a>(record: &'a [u8], layout: &SampleIdLayout) -> Option<PerfRecord<'a>> {
    let mut r = Reader::new(record, 0);
    let kind = r.u32()?;
    let misc = r.u16()?;
    let _size = r.u16()?;
    let trailer = || layout.parse(record);
    Some(match kind {
        b::PERF_RECORD_SWITCH => PerfRecord::Switch {
            out: u32::from(misc) & b::PERF_RECORD_MISC_SWITCH_OUT != 0,
            preempted: u32::from(misc) & b::PERF_RECORD_MISC_SWITCH_OUT_PREEMPT != 0,
            id: trailer()?,
        },
        b::PERF_RECORD_FORK | b::PERF_RECORD_EXIT => {
            let (pid, ppid, tid, ptid, time) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?, r.u64()?);
            if kind == b::PERF_RECORD_FORK {
                PerfRecord::Fork {
                    pid,
                    ppid,
                    tid,
                    ptid,
                    time,
                }
            } else {
                PerfRecord::Exit {
                    pid,
                    ppid,
                    tid,
                    ptid,
                    time,
                }
            }
        }
        b::PERF_RECORD_COMM => {
            let (pid, tid) = (r.u32()?, r.u32()?);
            let end = record.len().checked_sub(layout.len())?;
            PerfRecord::Comm {
                pid,
                tid,
                name: c_string(record.get(r.pos..end)?),
                exec: u32::from(misc) & b::PERF_RECORD_MISC_COMM_EXEC != 0,
                id: trailer()?,
            }
        }
        b::PERF_RECORD_MMAP2 => {
            let (pid, tid, addr, len, pgoff) = (r.u32()?, r.u32()?, r.u64()?, r.u64()?, r.u64()?);
            let id_bytes = r.bytes(24)?;
            let (build_id, inode) = if u32::from(misc) & b::PERF_RECORD_MISC_MMAP_BUILD_ID != 0 {
                let n = usize::from(id_bytes[0]).min(20);
                (Some(&id_bytes[4..4 + n]), None)
            } else {
                let word =
                    |at: usize| -> Option<[u8; 4]> { id_bytes.get(at..at + 4)?.try_into().ok() };
                let ino: [u8; 8] = id_bytes.get(8..16)?.try_into().ok()?;
                let inode = FileInode {
                    major: u32::from_ne_bytes(word(0)?),
                    minor: u32::from_ne_bytes(word(4)?),
                    ino: u64::from_ne_bytes(ino),
                };
                (None, Some(inode))
            };
            let (prot, _flags) = (r.u32()?, r.u32()?);
            let end = record.len().checked_sub(layout.len())?;
            PerfRecord::Mmap2 {
                pid,
                tid,
                addr,
                len,
                pgoff,
                prot,
                build_id,
                inode,
                path: c_string(record.get(r.pos..end)?),
                id: trailer()?,
            }
        }
        b::PERF_RECORD_LOST => {
            let _id = r.u64()?;
            PerfRecord::Lost { lost: r.u64()? }
        }
        b::PERF_RECORD_SAMPLE => PerfRecord::Sample {
            misc,
            body: record.get(8..)?,
        },
        other => PerfRecord::Other { kind: other },
    })
}

fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&c| c == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// A bounds-checked little cursor over a record's bytes.
pub struct Reader<'a> {
    buf: &'a [u8],
    pub pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], pos: usize) -> Self {
        Reader { buf, pos }
    }

    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.buf.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }

    pub fn u16(&mut self) -> Option<u16> {
        Some(u16::from_ne_bytes(self.bytes(2)?.try_into().ok()?))
    }

    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_ne_bytes(self.bytes(4)?.try_into().ok()?))
    }

    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_ne_bytes(self.bytes(8)?.try_into().ok()?))
    }
}

/// Whether a mapping's `prot` (of [`PerfRecord::Mmap2`]) lets it run code.
pub fn is_executable(prot: u32) -> bool {
    prot & libc::PROT_EXEC as u32 != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> SampleIdLayout {
        SampleIdLayout::new(u64::from(b::PERF_SAMPLE_TID | b::PERF_SAMPLE_TIME))
    }

    fn record(kind: u32, misc: u16, body: &[u8]) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&kind.to_ne_bytes());
        r.extend_from_slice(&misc.to_ne_bytes());
        r.extend_from_slice(&((8 + body.len()) as u16).to_ne_bytes());
        r.extend_from_slice(body);
        r
    }

    fn trailer(pid: u32, tid: u32, time: u64) -> Vec<u8> {
        [
            pid.to_ne_bytes().as_slice(),
            &tid.to_ne_bytes(),
            &time.to_ne_bytes(),
        ]
        .concat()
    }

    #[test]
    fn switch_out_with_preempt() {
        let misc = (b::PERF_RECORD_MISC_SWITCH_OUT | b::PERF_RECORD_MISC_SWITCH_OUT_PREEMPT) as u16;
        let rec = record(b::PERF_RECORD_SWITCH, misc, &trailer(5, 6, 77));
        let id = SampleId {
            pid: 5,
            tid: 6,
            time: 77,
            cpu: 0,
        };
        assert_eq!(
            parse(&rec, &layout()),
            Some(PerfRecord::Switch {
                out: true,
                preempted: true,
                id
            })
        );
    }

    #[test]
    fn comm_reads_name_before_trailer() {
        let mut body = [1u32.to_ne_bytes(), 2u32.to_ne_bytes()].concat();
        body.extend_from_slice(b"demo\0\0\0\0");
        body.extend_from_slice(&trailer(1, 2, 9));
        let rec = record(
            b::PERF_RECORD_COMM,
            b::PERF_RECORD_MISC_COMM_EXEC as u16,
            &body,
        );
        match parse(&rec, &layout()) {
            Some(PerfRecord::Comm { name, exec, id, .. }) => {
                assert_eq!((name.as_str(), exec, id.time), ("demo", true, 9));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn truncated_records_are_rejected() {
        let rec = record(b::PERF_RECORD_FORK, 0, &[0; 6]);
        assert_eq!(parse(&rec, &layout()), None);
    }
}
