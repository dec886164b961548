//! The runtime's spill, as `lapse recover` reads it: a sequence of `u32`
//! length + datagram, each datagram parsed with `Msg::parse` and, for
//! events, `protocol::events` (the parsing `recover` does before merging).
#![no_main]

use lapse_rt::protocol::{self, Msg};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut pos = 0usize;
    while let Some(len) = data.get(pos..pos + 4) {
        let len = u32::from_ne_bytes(len.try_into().expect("4 bytes")) as usize;
        let Some(datagram) = data.get(pos + 4..(pos + 4).saturating_add(len)) else {
            break; // a torn last datagram
        };
        pos += 4 + len;
        match Msg::parse(datagram) {
            Ok(Msg::Events { batch, .. }) => {
                let n = protocol::events(datagram).count();
                assert_eq!(
                    n, batch.count as usize,
                    "an accepted EVENTS datagram holds count events"
                );
            }
            Ok(Msg::ShmEvents { batch, buf, .. }) => {
                assert!(batch.count as usize <= protocol::BUF_EVENTS);
                assert!((buf as usize) < protocol::arena::BUFS);
            }
            _ => {}
        }
    }
});
