//! The figures of one scenario run: printed (visible with `--nocapture`) and, when
//! `FENCELOCK_REPORT` names a file, appended to it as a Markdown table row so that
//! `make soak` collects every scenario's measured results in one place.

use std::io::Write;

pub struct Summary {
    pub scenario: &'static str,
    pub fault: String,
    pub load: String,
    pub ops: usize,
    pub anomalies: usize,
    /// Anything else worth a column: control overlaps, rejected stale writes, losses.
    pub notes: String,
}

impl Summary {
    pub fn emit(&self) {
        let row = format!(
            "| {} | {} | {} | {} | {} | {} |",
            self.scenario, self.fault, self.load, self.ops, self.anomalies, self.notes
        );
        println!("RELIABILITY {row}");
        let Some(path) = std::env::var_os("FENCELOCK_REPORT") else {
            return;
        };
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(file, "{row}");
        }
    }
}

/// Fails the test with the first anomalies, after the summary has been emitted.
pub fn assert_none(what: &str, anomalies: &[String]) {
    assert!(
        anomalies.is_empty(),
        "{what}: {} anomalies, first ones:\n{}",
        anomalies.len(),
        anomalies
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
