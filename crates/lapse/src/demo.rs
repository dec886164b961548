//! `lapse demo`: records the bundled instrumented example and shows its summary.

use anyhow::{bail, Result};

pub fn run() -> Result<u8> {
    bail!("the demo program is not bundled in this build")
}
