//! Image garbage collection, as kubelet does it: when the node directory's filesystem is
//! more than `high_percent` used (85 by default), images no container uses are removed,
//! least recently used first, until usage is back under `low_percent` (80). Images younger
//! than `min_age` (2 minutes, a pull that a pod is about to use) and images imported from the
//! air-gap directory (pinned) stay. Removing an image removes the blobs and unpacked layers
//! no remaining image refers to: layers shared with a kept image stay.
//!
//! Which images are in use is the caller's knowledge (the pod workers'): it passes names
//! (as pods write them or normalized) or image IDs (config digests). The filesystem's usage
//! is read through [`DiskUsage`] so tests can give any numbers.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use super::records::ImageRecord;
use super::reference::Reference;
use super::store::{ContentStore, StoreError};

/// When to collect and how much.
#[derive(Debug, Clone, Copy)]
pub struct GcPolicy {
    /// Collect when usage reaches this percentage (kubelet's `imageGCHighThresholdPercent`).
    pub high_percent: u8,
    /// … down to this one (`imageGCLowThresholdPercent`).
    pub low_percent: u8,
    /// Images pulled more recently than this are never removed (`imageMinimumGCAge`).
    pub min_age: Duration,
}

impl Default for GcPolicy {
    fn default() -> GcPolicy {
        GcPolicy {
            high_percent: 85,
            low_percent: 80,
            min_age: Duration::from_secs(120),
        }
    }
}

/// A filesystem's size and free space, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskUsage {
    pub capacity: u64,
    /// Free to unprivileged users.
    pub available: u64,
}

impl DiskUsage {
    /// The filesystem holding `path`.
    pub fn of(path: &Path) -> std::io::Result<DiskUsage> {
        let s = nix::sys::statvfs::statvfs(path)?;
        let unit = s.fragment_size() as u64;
        Ok(DiskUsage {
            capacity: s.blocks() as u64 * unit,
            available: s.blocks_available() as u64 * unit,
        })
    }

    pub fn used(&self) -> u64 {
        self.capacity.saturating_sub(self.available)
    }

    pub fn percent(&self) -> u64 {
        match self.capacity {
            0 => 0,
            c => self.used() * 100 / c,
        }
    }
}

/// What a collection did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Usage before, in percent.
    pub usage_percent: u64,
    /// The bytes it tried to free (0: under the high threshold).
    pub wanted: u64,
    /// The images removed, in order.
    pub removed: Vec<String>,
    pub freed: u64,
}

/// Collects if `usage` is over the policy's high threshold (see the module documentation).
/// `now` is in unix seconds.
pub fn collect(
    store: &ContentStore,
    policy: &GcPolicy,
    usage: DiskUsage,
    in_use: &BTreeSet<String>,
    now: u64,
) -> Result<GcReport, StoreError> {
    let mut report = GcReport {
        usage_percent: usage.percent(),
        ..GcReport::default()
    };
    if usage.percent() < u64::from(policy.high_percent) {
        return Ok(report);
    }
    let target = usage.capacity / 100 * u64::from(policy.low_percent);
    report.wanted = usage.used().saturating_sub(target);
    let images = store.images();
    let used_names: BTreeSet<String> = in_use
        .iter()
        .flat_map(|n| {
            [
                n.clone(),
                Reference::parse(n)
                    .map(|r| r.to_string())
                    .unwrap_or_default(),
            ]
        })
        .collect();
    // An image in use keeps every name of the same image ID.
    let used_ids: BTreeSet<String> = images
        .iter()
        .filter(|r| used_names.contains(&r.name) || used_names.contains(&r.config.to_string()))
        .map(|r| r.config.to_string())
        .collect();
    let min_age = policy.min_age.as_secs();
    let mut candidates: Vec<&ImageRecord> = images
        .iter()
        .filter(|r| !r.pinned && !used_ids.contains(&r.config.to_string()))
        .filter(|r| r.pulled_at.saturating_add(min_age) <= now)
        .collect();
    candidates.sort_by_key(|r| (r.last_used, r.pulled_at));
    for image in candidates {
        if report.freed >= report.wanted {
            break;
        }
        store.remove_image(&image.name)?;
        let freed = store.prune()?;
        tracing::info!(
            "image GC: removed {} (last used {}s ago), {freed} bytes freed",
            image.name,
            now.saturating_sub(image.last_used)
        );
        report.freed += freed;
        report.removed.push(image.name.clone());
    }
    if report.freed < report.wanted {
        tracing::warn!(
            "image GC: disk {}% used, freed {} of the {} bytes wanted: the rest is in use",
            report.usage_percent,
            report.freed,
            report.wanted
        );
    }
    Ok(report)
}
