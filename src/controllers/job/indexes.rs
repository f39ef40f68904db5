//! Completion indexes of Indexed Jobs: the `batch.kubernetes.io/job-completion-index`
//! annotation, and sets of indexes as ordered intervals written the way
//! `status.completedIndexes` and `status.failedIndexes` are (`1,3-5,7`: a run of two is
//! written `1,2`, of three or more `1-3`). Also the indexes still to start, the surplus pods of
//! an index, and the success policy's rules, which count indexes.

use std::collections::BTreeSet;
use std::fmt;

use serde_json::Value;

/// The annotation (and label) holding a pod's completion index.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// A pod's completion index; `None` when missing or not a non-negative number.
pub fn completion_index(pod: &Value) -> Option<i64> {
    pod.pointer("/metadata/annotations")
        .and_then(|a| a.get(COMPLETION_INDEX))
        .and_then(Value::as_str)
        .and_then(|v| v.parse::<i64>().ok())
        .filter(|i| *i >= 0)
}

/// A pod's completion index when it is one of the job's (below `completions`).
pub fn valid_index(pod: &Value, completions: i64) -> Option<i64> {
    completion_index(pod).filter(|i| *i < completions)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    pub first: i64,
    pub last: i64,
}

/// Ordered, disjoint, non-adjacent intervals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Intervals(pub Vec<Interval>);

impl Intervals {
    /// Reads `1,3-5`; parts that are not numbers are skipped, indexes at or above
    /// `completions` dropped (the job may have been scaled down).
    pub fn parse(text: &str, completions: i64) -> Intervals {
        let mut result: Vec<Interval> = Vec::new();
        if text.is_empty() {
            return Intervals(result);
        }
        for part in text.split(',') {
            let mut limits = part.split('-');
            let Some(Ok(first)) = limits.next().map(str::parse::<i64>) else {
                continue;
            };
            if first >= completions {
                break;
            }
            let last = match limits.next() {
                Some(text) => match text.parse::<i64>() {
                    Ok(last) => last.min(completions - 1),
                    Err(_) => continue,
                },
                None => first,
            };
            match result.last_mut() {
                Some(prev) if prev.last == first - 1 => prev.last = last,
                _ => result.push(Interval { first, last }),
            }
        }
        Intervals(result)
    }

    /// These intervals with `indexes` (in increasing order) added.
    pub fn with_indexes(&self, indexes: impl IntoIterator<Item = i64>) -> Intervals {
        let added = Intervals(
            indexes
                .into_iter()
                .map(|i| Interval { first: i, last: i })
                .collect(),
        );
        self.merge(&added)
    }

    /// The union of two interval lists.
    pub fn merge(&self, other: &Intervals) -> Intervals {
        let mut all: Vec<Interval> = self.0.iter().chain(other.0.iter()).copied().collect();
        all.sort_by_key(|i| i.first);
        let mut result: Vec<Interval> = Vec::with_capacity(all.len());
        for interval in all {
            match result.last_mut() {
                Some(last) if interval.first <= last.last + 1 => {
                    last.last = last.last.max(interval.last)
                }
                _ => result.push(interval),
            }
        }
        Intervals(result)
    }

    /// How many indexes the intervals hold.
    pub fn total(&self) -> i64 {
        self.0.iter().map(|i| i.last - i.first + 1).sum()
    }

    pub fn has(&self, index: i64) -> bool {
        let at = self.0.partition_point(|i| i.last < index);
        self.0.get(at).is_some_and(|i| i.first <= index)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for Intervals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, interval) in self.0.iter().enumerate() {
            if n > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}", interval.first)?;
            if interval.last == interval.first + 1 {
                write!(f, ",{}", interval.last)?;
            } else if interval.last > interval.first {
                write!(f, "-{}", interval.last)?;
            }
        }
        Ok(())
    }
}

/// The first `count` indexes below `completions` that are neither taken (succeeded, failed,
/// running) nor in `busy`.
pub fn first_pending(busy: &Intervals, count: usize, completions: i64) -> Vec<i64> {
    let mut result = Vec::with_capacity(count);
    let mut candidate = 0;
    for interval in &busy.0 {
        while candidate < completions && result.len() < count && candidate < interval.first {
            result.push(candidate);
            candidate += 1;
        }
        candidate = candidate.max(interval.last + 1);
    }
    while candidate < completions && result.len() < count {
        result.push(candidate);
        candidate += 1;
    }
    result
}

/// The indexes of `pods` (those that have one).
pub fn indexes_of<'a>(pods: impl IntoIterator<Item = &'a Value>) -> BTreeSet<i64> {
    pods.into_iter().filter_map(completion_index).collect()
}

/// Whether the succeeded indexes satisfy one of the success policy's rules; the message names
/// the first that is (`Matched rules at index N`).
pub fn success_policy_met(
    policy: &Value,
    completions: i64,
    succeeded: &Intervals,
) -> Option<String> {
    if succeeded.is_empty() {
        return None;
    }
    let rules = policy.get("rules").and_then(Value::as_array)?;
    for (n, rule) in rules.iter().enumerate() {
        let count = rule.get("succeededCount").and_then(Value::as_i64);
        let met = match rule.get("succeededIndexes").and_then(Value::as_str) {
            Some(text) => {
                let required = Intervals::parse(text, completions);
                if required.is_empty() {
                    continue;
                }
                let contained = overlap(&required, succeeded);
                contained == required.total() || count.is_some_and(|c| contained >= c)
            }
            None => count.is_some_and(|c| succeeded.total() >= c),
        };
        if met {
            return Some(format!("Matched rules at index {n}"));
        }
    }
    None
}

/// How many indexes two interval lists share.
fn overlap(a: &Intervals, b: &Intervals) -> i64 {
    let (mut i, mut j, mut shared) = (0, 0, 0);
    while i < a.0.len() && j < b.0.len() {
        let (x, y) = (a.0[i], b.0[j]);
        shared += (x.last.min(y.last) - x.first.max(y.first) + 1).max(0);
        if y.last < x.last {
            j += 1;
        } else if y.last > x.last {
            i += 1;
        } else {
            i += 1;
            j += 1;
        }
    }
    shared
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completed_indexes_strings() {
        let table = [
            (vec![], ""),
            (vec![0], "0"),
            (vec![0, 1], "0,1"),
            (vec![0, 1, 2], "0-2"),
            (vec![1, 3, 4, 5, 7], "1,3-5,7"),
            (vec![0, 2, 3, 9, 10, 11, 12], "0,2,3,9-12"),
        ];
        for (indexes, text) in table {
            let intervals = Intervals::default().with_indexes(indexes.clone());
            assert_eq!(intervals.to_string(), text, "{indexes:?}");
            assert_eq!(intervals.total(), indexes.len() as i64);
            // Reading the string back gives the same set.
            assert_eq!(Intervals::parse(text, 100), intervals, "{text}");
        }
        // Merging fills gaps and joins neighbours.
        let a = Intervals::parse("0-2,7", 100);
        assert_eq!(a.with_indexes([3, 5, 6]).to_string(), "0-3,5-7");
        assert_eq!(a.merge(&Intervals::parse("1-9", 100)).to_string(), "0-9");
        // Indexes beyond completions are dropped; garbage is skipped.
        assert_eq!(Intervals::parse("0-4,8,x,9", 6).to_string(), "0-4");
        assert_eq!(Intervals::parse("x,2-y,3", 6).to_string(), "3");
        assert!(a.has(1) && a.has(7) && !a.has(3) && !a.has(8));
    }

    #[test]
    fn pending_indexes_skip_busy_ones() {
        let busy = Intervals::parse("0,2-3,6", 10);
        assert_eq!(first_pending(&busy, 3, 10), vec![1, 4, 5]);
        assert_eq!(first_pending(&busy, 10, 10), vec![1, 4, 5, 7, 8, 9]);
        assert_eq!(first_pending(&busy, 10, 5), vec![1, 4]);
        assert_eq!(first_pending(&Intervals::default(), 2, 10), vec![0, 1]);
    }

    #[test]
    fn success_policy_rules() {
        let done = Intervals::parse("0-2,5", 10);
        let policy = |rules: Value| serde_json::json!({ "rules": rules });
        let met = |rules: Value| success_policy_met(&policy(rules), 10, &done);
        assert_eq!(
            met(serde_json::json!([{"succeededIndexes": "0-2"}])).as_deref(),
            Some("Matched rules at index 0")
        );
        assert_eq!(met(serde_json::json!([{"succeededIndexes": "0-3"}])), None);
        assert_eq!(
            met(serde_json::json!([{"succeededIndexes": "9"},
                {"succeededIndexes": "1-6", "succeededCount": 3}]))
            .as_deref(),
            Some("Matched rules at index 1")
        );
        assert_eq!(
            met(serde_json::json!([{"succeededCount": 4}])).as_deref(),
            Some("Matched rules at index 0")
        );
        assert_eq!(met(serde_json::json!([{"succeededCount": 5}])), None);
    }
}
