//! The Chrome trace importer: any JSON in, an error or a data file out; and
//! what it writes must read back whole (the writer never writes what the
//! reader refuses).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(imported) = lapse_import::import(data, "fuzz.json") else {
        return;
    };
    let mut out = Vec::new();
    let written = imported.write(&mut out).expect("writing to memory");
    let file = lapse_data::DataFile::from_bytes(Path::new("imported.data"), out.clone())
        .expect("an imported trace reads back");
    assert!(file.damage.is_none(), "{:?}", file.damage);
    assert_eq!(file.total_events(), written);
    lapse_fuzz::exercise_data_file(&out);
});
