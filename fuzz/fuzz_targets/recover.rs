//! `lapse recover` end to end: the input is a spill, merged into a small
//! instrumentation recording (the `synthetic` seed) in a scratch directory.
//! Slower than the others (files, a scan of /proc), but it reaches what the
//! merge does with each datagram, not only its parsing.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

/// The recording the spill is merged into (the seed without its mode byte).
static RECORDING: &[u8] = include_bytes!("../corpus/data_file/synthetic.lapse");

fn scratch() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("lapse-fuzz-recover-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        dir
    })
}

fuzz_target!(|data: &[u8]| {
    let file = scratch().join("r.data");
    std::fs::write(&file, &RECORDING[1..]).expect("write the recording");
    std::fs::write(lapse_record::spill_path(&file), data).expect("write the spill");
    let _ = lapse_record::recover(&file);
});
