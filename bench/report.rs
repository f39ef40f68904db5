//! What the benchmarks share to report their figures: the machine, percentiles of sorted
//! durations, and the Markdown table of metric, result, target and whether the target was
//! met. Each benchmark uses the part it needs.
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

/// The machine a table was measured on: its core count and CPU model (`/proc/cpuinfo`).
pub fn machine() -> (usize, String) {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".to_string());
    (cores, cpu)
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
