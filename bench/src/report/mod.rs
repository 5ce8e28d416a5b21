//! Reporting: the tables, the targets, the chart, report.json, the docs page and
//! `combine`'s page of several servers, all made from the results.

pub mod combine;
pub mod docs;
pub mod json;
pub mod svg;
pub mod table;
pub mod targets;
pub mod text;
