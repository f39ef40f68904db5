//! Lease specifics (coordination.k8s.io/v1): MicroTime fields re-emitted with exactly six
//! fractional digits, leaseDurationSeconds > 0, and PUT without a resourceVersion refused
//! (kubernetes pkg/registry/coordination/lease/strategy.go).

use serde_json::{json, Value};

use super::status::{ApiError, Cause};
use crate::kube::resources::ResourceInfo;

pub fn is_lease(info: &ResourceInfo) -> bool {
    info.group == "coordination.k8s.io" && info.plural == "leases"
}

/// `metav1.MicroTime` as upstream writes it: `2006-01-02T15:04:05.000000Z`.
pub fn format_micro(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// Parses any RFC3339 time (with or without fraction, any offset).
pub fn parse_time(s: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&chrono::Utc))
}

/// Normalizes and validates a Lease before it is stored.
pub fn prepare(info: &ResourceInfo, name: &str, object: &mut Value) -> Result<(), ApiError> {
    let mut causes = Vec::new();
    if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
        for field in ["acquireTime", "renewTime"] {
            match spec.get(field) {
                None | Some(Value::Null) => {}
                Some(Value::String(s)) => match parse_time(s) {
                    Some(t) => {
                        spec.insert(field.into(), json!(format_micro(t)));
                    }
                    None => causes.push(Cause::invalid(
                        &format!("spec.{field}"),
                        &json!(s),
                        "must be an RFC3339 time",
                    )),
                },
                Some(other) => causes.push(Cause::invalid(
                    &format!("spec.{field}"),
                    other,
                    "must be an RFC3339 time",
                )),
            }
        }
        if let Some(d) = spec.get("leaseDurationSeconds").filter(|v| !v.is_null()) {
            if d.as_i64().is_none_or(|d| d <= 0) {
                causes.push(Cause::invalid(
                    "spec.leaseDurationSeconds",
                    d,
                    "must be greater than 0",
                ));
            }
        }
        if let Some(t) = spec.get("leaseTransitions").filter(|v| !v.is_null()) {
            if t.as_i64().is_none_or(|t| t < 0) {
                causes.push(Cause::invalid(
                    "spec.leaseTransitions",
                    t,
                    "must be greater than or equal to 0",
                ));
            }
        }
    } else if object.get("spec").is_some_and(|s| !s.is_null()) {
        causes.push(Cause::invalid("spec", &object["spec"], "must be an object"));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(info, name, causes))
    }
}

/// The 422 for a Lease PUT without `metadata.resourceVersion`.
pub fn missing_rv(info: &ResourceInfo, name: &str) -> ApiError {
    ApiError::invalid(
        info,
        name,
        vec![Cause::invalid(
            "metadata.resourceVersion",
            &json!(0),
            "must be specified for an update",
        )],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::resources;

    #[test]
    fn micro_times_normalized() {
        let lease = resources::find("coordination.k8s.io", "v1", "leases").unwrap();
        for (input, want) in [
            ("2024-05-01T10:00:00Z", "2024-05-01T10:00:00.000000Z"),
            ("2024-05-01T10:00:00.123Z", "2024-05-01T10:00:00.123000Z"),
            (
                "2024-05-01T12:00:00.000000+02:00",
                "2024-05-01T10:00:00.000000Z",
            ),
            (
                "2024-05-01T10:00:00.123456789Z",
                "2024-05-01T10:00:00.123456Z",
            ),
        ] {
            let mut obj = json!({"spec":{"renewTime":input,"leaseDurationSeconds":10}});
            prepare(lease, "l", &mut obj).unwrap();
            assert_eq!(obj["spec"]["renewTime"], want, "{input}");
        }
        let mut bad = json!({"spec":{"acquireTime":"yesterday"}});
        assert!(prepare(lease, "l", &mut bad).is_err());
        let mut zero = json!({"spec":{"leaseDurationSeconds":0}});
        let err = prepare(lease, "l", &mut zero).unwrap_err();
        assert_eq!(err.to_string(), "Lease.coordination.k8s.io \"l\" is invalid: spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0");
    }
}
