//! A deterministic fuzzer for the reader that runs with `cargo test` (the
//! coverage-guided ones are in `fuzz/`, run by `.ci/fuzz`): thousands of
//! random corruptions of a valid file — flipped bytes, overwritten length
//! fields, truncations, spliced garbage — must each give an error or a readable file, never a panic or a huge
//! allocation, and decoding every indexed chunk must not panic either.

use std::path::Path;

use lapse_data::*;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn valid_file() -> Vec<u8> {
    let mut w = DataWriter::new(Vec::new()).unwrap();
    w.write_record(&Record::Session(SessionHeader {
        command: vec!["x".into()],
        ..SessionHeader::example(Method::Sampling)
    }))
    .unwrap();
    w.write_record(&Record::Functions(
        (0..50)
            .map(|i| FunctionInfo {
                id: FunctionId(i),
                module: ModuleId(0),
                address: 16 * u64::from(i),
                name: format!("f{i}"),
                source_file: None,
                line: None,
            })
            .collect(),
    ))
    .unwrap();
    w.write_record(&Record::Stacks(
        (0..20)
            .map(|i| StackNode {
                id: StackId(i),
                parent: i.checked_sub(1).map(StackId),
                frame: FrameId(i),
            })
            .collect(),
    ))
    .unwrap();
    let events: Vec<Event> = (0..3000u64)
        .map(|i| Event {
            ts: Timestamp::from_nanos(i * 37),
            kind: if i % 2 == 0 {
                EventKind::Enter
            } else {
                EventKind::Exit
            },
            function: FunctionId((i / 2 % 50) as u32),
        })
        .collect();
    w.write_events(1, 1, &events).unwrap();
    let samples: Vec<Sample> = (0..500u64)
        .map(|i| Sample {
            pid: 1,
            tid: 1,
            serial: 0,
            ts: Timestamp::from_nanos(i * 1000),
            cpu: 0,
            stack: Some(StackId((i % 20) as u32)),
            weight: 1_000_000,
        })
        .collect();
    w.write_samples(&samples).unwrap();
    w.write_record(&Record::Footer(Footer::default())).unwrap();
    w.into_inner()
}

fn exercise(bytes: Vec<u8>) {
    if let Ok(f) = DataFile::from_bytes(Path::new("m.data"), bytes) {
        let mut ev = Vec::new();
        for c in &f.event_chunks {
            let _ = f.read_events(c, &mut ev);
        }
        let mut s = Vec::new();
        for c in &f.sample_chunks {
            let _ = f.read_samples(c, &mut s);
        }
    }
}

#[test]
fn random_corruptions_never_panic() {
    let base = valid_file();
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for round in 0..4000 {
        let mut b = base.clone();
        match round % 4 {
            0 => {
                for _ in 0..1 + rng.below(8) {
                    let i = rng.below(b.len());
                    b[i] ^= 1 << rng.below(8);
                }
            }
            1 => {
                let cut = rng.below(b.len());
                b.truncate(cut);
            }
            2 => {
                // Overwrite a 4-byte field somewhere after the file header with a random value.
                let i = 16 + rng.below(b.len() - 20);
                b[i..i + 4].copy_from_slice(&(rng.next() as u32).to_le_bytes());
            }
            _ => {
                let i = rng.below(b.len());
                let junk: Vec<u8> = (0..rng.below(64)).map(|_| rng.next() as u8).collect();
                b.splice(i..i, junk);
            }
        }
        exercise(b);
    }
}

#[test]
fn corrupted_but_checksummed_payloads_never_panic() {
    // The checksum catches random damage, so also forge chunks whose CRC is
    // right but whose content is garbage: the decoders must cope.
    let mut rng = Rng(42);
    // A valid file holding only the session header, so that the reader gets
    // as far as decoding what follows.
    let base = valid_file();
    let first = DataFile::from_bytes(Path::new("m.data"), base.clone()).unwrap();
    let session_end = first.event_chunks[0].offset as usize;
    let prefix = {
        // header + session record + function table + stacks: everything before the events
        base[..session_end].to_vec()
    };
    for _ in 0..2000 {
        let mut b = prefix.clone();
        let tag = 1 + rng.below(4) as u8;
        let body: Vec<u8> = (0..rng.below(200)).map(|_| rng.next() as u8).collect();
        let flags = rng.below(2) as u8;
        let header = lapse_data::format::ChunkHeader {
            tag,
            flags,
            stored_len: body.len() as u32,
            raw_len: rng.below(1 << 20) as u32,
            crc: crc32fast_hash(&body),
            serial: 0,
        };
        b.extend_from_slice(&header.encode());
        b.extend_from_slice(&body);
        exercise(b);
    }
}

fn crc32fast_hash(b: &[u8]) -> u32 {
    // Same CRC-32 (IEEE) as the writer, computed bitwise to keep the test self-contained.
    let mut crc = !0u32;
    for &x in b {
        crc ^= u32::from(x);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
