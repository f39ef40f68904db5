//! What the benchmarks share to report their figures: percentiles of sorted durations, and the
//! Markdown table of metric, result, target and whether the target was met. Each benchmark
//! uses the part it needs.
#![allow(dead_code)]

use std::time::Duration;

/// The `p` quantile (0 to 1) of `sorted` by nearest rank; zero for no samples.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// One line of a benchmark's table.
pub struct Row {
    pub metric: String,
    pub result: String,
    pub target: String,
    /// Whether the target was met; `None` for a figure without a target.
    pub met: Option<bool>,
}

pub fn row(
    metric: impl Into<String>,
    result: impl Into<String>,
    target: &str,
    met: Option<bool>,
) -> Row {
    Row {
        metric: metric.into(),
        result: result.into(),
        target: target.to_string(),
        met,
    }
}

/// The Markdown table of `rows` (a missed target in bold).
pub fn table(rows: &[Row]) -> String {
    let mut md = String::from("| Metric | Result | Target | Met |\n| --- | --- | --- | --- |\n");
    for r in rows {
        let met = match r.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "",
        };
        md.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            r.metric, r.result, r.target, met
        ));
    }
    md
}
