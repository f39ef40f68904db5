//! A Job's `podFailurePolicy` applied to a failed pod, as kube-controller-manager matches it:
//! the first rule that matches decides. `onExitCodes` matches a terminated container (of the
//! named one, or any; init containers after the others) whose non-zero exit code is `In` (or
//! `NotIn`) the values; `onPodConditions` matches a pod condition of the given type and
//! status. Actions: `FailJob` fails the whole Job (with a message naming the container or
//! condition), `FailIndex` fails the pod's index (jobs with `backoffLimitPerIndex`), `Ignore`
//! does not count the failure against the backoff limit, `Count` counts it as usual. A pod
//! no rule matches counts as usual.

use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    FailJob,
    FailIndex,
    Ignore,
    Count,
}

/// What the policy says about one failed pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The rule that matched, if any.
    pub action: Option<Action>,
    /// Whether the failure counts against the backoff limits.
    pub counts: bool,
    /// The Job's failure message when a `FailJob` rule matched.
    pub fail_job: Option<String>,
}

impl Verdict {
    fn unmatched() -> Verdict {
        Verdict {
            action: None,
            counts: true,
            fail_job: None,
        }
    }
}

/// Applies `policy` (a `podFailurePolicy`, or null) to `pod`.
pub fn judge(policy: Option<&Value>, pod: &Value) -> Verdict {
    let Some(rules) = policy
        .and_then(|p| p.get("rules"))
        .and_then(Value::as_array)
    else {
        return Verdict::unmatched();
    };
    let namespace = pod
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let name = pod
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    for (index, rule) in rules.iter().enumerate() {
        let action_name = rule.get("action").and_then(Value::as_str).unwrap_or("");
        let described = if let Some(requirement) = rule.get("onExitCodes").filter(|v| !v.is_null())
        {
            match matching_container(pod, requirement) {
                Some((container, code)) => format!(
                    "Container {container} for pod {namespace}/{name} failed with exit code {code} matching {action_name} rule at index {index}"
                ),
                None => continue,
            }
        } else if let Some(patterns) = rule.get("onPodConditions").and_then(Value::as_array) {
            match matching_condition(pod, patterns) {
                Some(kind) => format!(
                    "Pod {namespace}/{name} has condition {kind} matching {action_name} rule at index {index}"
                ),
                None => continue,
            }
        } else {
            continue;
        };
        let (action, counts) = match action_name {
            "Ignore" => (Action::Ignore, false),
            "Count" => (Action::Count, true),
            "FailIndex" => (Action::FailIndex, true),
            "FailJob" => (Action::FailJob, true),
            // An action this version does not know: the next rule decides, as upstream's
            // switch falls through.
            _ => continue,
        };
        return Verdict {
            action: Some(action),
            counts,
            fail_job: (action == Action::FailJob).then_some(described),
        };
    }
    Verdict::unmatched()
}

/// The first terminated container with a non-zero exit code the requirement matches.
fn matching_container(pod: &Value, requirement: &Value) -> Option<(String, i64)> {
    let wanted = requirement.get("containerName").and_then(Value::as_str);
    let operator = requirement.get("operator").and_then(Value::as_str)?;
    let values: Vec<i64> = requirement
        .get("values")
        .and_then(Value::as_array)
        .map(|v| v.iter().filter_map(Value::as_i64).collect())
        .unwrap_or_default();
    for list in ["containerStatuses", "initContainerStatuses"] {
        let Some(statuses) = pod
            .pointer(&format!("/status/{list}"))
            .and_then(Value::as_array)
        else {
            continue;
        };
        for status in statuses {
            let Some(code) = status
                .pointer("/state/terminated/exitCode")
                .and_then(Value::as_i64)
            else {
                continue;
            };
            let container = status.get("name").and_then(Value::as_str).unwrap_or("");
            if wanted.is_some_and(|w| w != container) || code == 0 {
                continue;
            }
            let matches = match operator {
                "In" => values.contains(&code),
                "NotIn" => !values.contains(&code),
                _ => false,
            };
            if matches {
                return Some((container.to_string(), code));
            }
        }
    }
    None
}

/// The type of the first pod condition matching one of the patterns.
fn matching_condition(pod: &Value, patterns: &[Value]) -> Option<String> {
    let conditions = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)?;
    for condition in conditions {
        let kind = condition.get("type").and_then(Value::as_str).unwrap_or("");
        let status = condition
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or("");
        let matched = patterns.iter().any(|p| {
            p.get("type").and_then(Value::as_str) == Some(kind)
                && p.get("status").and_then(Value::as_str).unwrap_or("True") == status
        });
        if matched {
            return Some(kind.to_string());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn failed(code: i64, container: &str, conditions: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns"}, "status": {"phase": "Failed",
            "conditions": conditions,
            "containerStatuses": [
                {"name": "side", "state": {"terminated": {"exitCode": 0}}},
                {"name": container, "state": {"terminated": {"exitCode": code}}}]}})
    }

    #[test]
    fn the_first_matching_rule_decides() {
        let policy = json!({"rules": [
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [3]}},
            {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [1, 2]}},
        ]});
        let judge_pod = |pod: &Value| judge(Some(&policy), pod);
        let v = judge_pod(&failed(42, "main", json!([])));
        assert_eq!(v.action, Some(Action::FailJob));
        assert_eq!(
            v.fail_job.as_deref(),
            Some("Container main for pod ns/p failed with exit code 42 matching FailJob rule at index 0")
        );
        // Exit code 42 of another container is not the rule's.
        assert_eq!(
            judge_pod(&failed(42, "other", json!([]))).action,
            Some(Action::Count)
        );
        let disrupted = failed(
            1,
            "main",
            json!([{"type": "DisruptionTarget", "status": "True"}]),
        );
        let v = judge_pod(&disrupted);
        assert_eq!((v.action, v.counts), (Some(Action::Ignore), false));
        assert_eq!(
            judge_pod(&failed(3, "x", json!([]))).action,
            Some(Action::FailIndex)
        );
        // 1 is excluded by NotIn and matches nothing else: counted without an action.
        let v = judge_pod(&failed(1, "x", json!([])));
        assert_eq!((v.action, v.counts), (None, true));
        assert_eq!(
            judge(None, &failed(42, "main", json!([]))),
            Verdict::unmatched()
        );
        // A FailJob on a condition names it.
        let on_condition = json!({"rules": [{"action": "FailJob",
            "onPodConditions": [{"type": "ConfigIssue"}]}]});
        let v = judge(
            Some(&on_condition),
            &failed(
                1,
                "main",
                json!([{"type": "ConfigIssue", "status": "True"}]),
            ),
        );
        assert_eq!(
            v.fail_job.as_deref(),
            Some("Pod ns/p has condition ConfigIssue matching FailJob rule at index 0")
        );
    }
}
