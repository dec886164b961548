//! Reports: shapes an analysis (`lapse_analysis::run`) into the views of
//! SPEC section 3 as a [`ViewSpec`] asks ([`build`]: built, sorted, cut) and
//! renders them as aligned tables, CSV or JSON ([`mod@render`]); says what a
//! file holds ([`info`]); compares two recordings view row by view row
//! ([`diff`], written by [`diff_render`]). Reports take a writer; nothing
//! here touches a terminal or a file by name.

mod build;
pub mod columns;
pub mod diff;
pub mod diff_render;
mod diff_totals;
mod error;
pub mod info;
pub mod render;
mod render_table;
mod sort;
pub mod spec;
pub mod table;
pub mod units;
pub mod views;

pub use build::build;
pub use error::ReportError;
pub use info::Info;
pub use render::render;
pub use sort::RankBy;
pub use spec::{Format, RenderOptions, ViewSpec};
pub use views::{Body, Focus, View, ViewOutput};
