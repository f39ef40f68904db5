//! A rolling update's bounds: `maxSurge` and `maxUnavailable` as absolute numbers or
//! percentages of `spec.replicas`, resolved as kube-controller-manager does
//! (`ResolveFenceposts`): the surge rounds up, the unavailability rounds down, and when both
//! come out zero one pod may be unavailable (otherwise no rollout could progress).

use serde_json::Value;

/// `intstr.GetScaledValueFromIntOrPercent`: a number as it is, `"N%"` as N% of `total`
/// rounded up or down; any other string is an error. Absent counts as zero.
pub fn scaled_value(value: Option<&Value>, total: i64, round_up: bool) -> Result<i64, String> {
    match value {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => n
            .as_i64()
            .ok_or_else(|| format!("invalid value for IntOrString: {n}")),
        Some(Value::String(s)) => {
            let percent = s
                .strip_suffix('%')
                .ok_or_else(|| format!("invalid value for IntOrString: invalid type: string is not a percentage: {s:?}"))?
                .parse::<i64>()
                .map_err(|e| format!("invalid value for IntOrString: {s:?}: {e}"))?;
            let scaled = percent.saturating_mul(total);
            Ok(if round_up {
                scaled.div_euclid(100) + i64::from(scaled.rem_euclid(100) != 0)
            } else {
                scaled.div_euclid(100)
            })
        }
        Some(other) => Err(format!("invalid value for IntOrString: {other}")),
    }
}

/// (surge, unavailable) for `desired` replicas.
pub fn resolve(
    max_surge: Option<&Value>,
    max_unavailable: Option<&Value>,
    desired: i64,
) -> Result<(i64, i64), String> {
    let surge = scaled_value(max_surge, desired, true)?;
    let mut unavailable = scaled_value(max_unavailable, desired, false)?;
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    Ok((surge, unavailable))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn percentages_round_surge_up_and_unavailability_down() {
        // The defaults, 25% each, for a few sizes (kubectl's examples: 3 replicas surge to 4
        // with none unavailable; 10 replicas, 3 and 2).
        for (desired, want) in [
            (1, (1, 0)),
            (3, (1, 0)),
            (4, (1, 1)),
            (10, (3, 2)),
            (0, (0, 1)),
        ] {
            assert_eq!(
                resolve(Some(&json!("25%")), Some(&json!("25%")), desired),
                Ok(want),
                "{desired}"
            );
        }
        assert_eq!(resolve(Some(&json!(2)), Some(&json!("50%")), 5), Ok((2, 2)));
        assert_eq!(
            resolve(Some(&json!("100%")), Some(&json!(0)), 3),
            Ok((3, 0))
        );
        // Both zero: one may be unavailable.
        assert_eq!(resolve(Some(&json!(0)), Some(&json!("0%")), 3), Ok((0, 1)));
        assert_eq!(resolve(None, None, 3), Ok((0, 1)));
        assert_eq!(scaled_value(Some(&json!("33%")), 10, true), Ok(4));
        assert_eq!(scaled_value(Some(&json!("33%")), 10, false), Ok(3));
    }

    #[test]
    fn strings_must_be_percentages() {
        assert!(scaled_value(Some(&json!("5")), 10, true).is_err());
        assert!(scaled_value(Some(&json!("x%")), 10, true).is_err());
        assert!(scaled_value(Some(&json!(true)), 10, true).is_err());
    }
}
