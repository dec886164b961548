//! Reports: shapes an analysis (`lapse_analysis::run`) into the views of
//! SPEC section 3 ([`views`]) and renders them as aligned tables, CSV or
//! JSON ([`mod@render`]); compares two recordings view row by view row
//! ([`diff`]). Reports take a writer; nothing here touches a terminal or a
//! file by name.

pub mod columns;
pub mod diff;
mod diff_render;
mod diff_totals;
mod error;
pub mod render;
mod render_table;
pub mod table;
pub mod units;
pub mod views;

pub use error::ReportError;
pub use render::{render, Format, RenderOptions};
pub use views::{build_view, View};
