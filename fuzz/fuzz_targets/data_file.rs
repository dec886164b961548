//! The data-file reader: `DataFile::from_bytes`, then every chunk (events,
//! samples) and table. The first byte picks whether checksums are repaired
//! first (to reach the decoders) or left as mutated (to test the framing).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut bytes = rest.to_vec();
    if mode & 1 == 0 {
        lapse_fuzz::fix_checksums(&mut bytes);
    }
    lapse_fuzz::exercise_data_file(&bytes);
});
