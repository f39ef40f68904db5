//! kube-apiserver's `ServiceAccount` admission plugin, for new pods (mirror pods excepted):
//! the pod runs as `spec.serviceAccountName` (`default` when unset), and unless the pod or its
//! service account turns `automountServiceAccountToken` off, it gets the `kube-api-access-<5
//! random characters>` projected volume — a bound token of the account (3607 s, which the
//! node refreshes), the cluster CA from the namespace's `kube-root-ca.crt` ConfigMap and the
//! namespace — mounted read-only at `/var/run/secrets/kubernetes.io/serviceaccount` in every
//! container and init container that has nothing mounted there.
//!
//! One difference: kube-apiserver refuses a pod whose service account does not exist yet;
//! here the pod is admitted (its token is refused until the account exists), so a pod
//! created right after its namespace does not race the controller that makes `default`.

use rand::Rng;
use serde_json::{json, Map, Value};

use super::Operation;
use crate::api::request::ApiRequest;
use crate::api::status::ApiError;
use crate::kube::object::ObjectKey;

const MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
const VOLUME_PREFIX: &str = "kube-api-access-";
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// kube-apiserver's token lifetime for the volume: an hour and a bit, so a token that old
/// is recognisable as one a node failed to refresh.
const TOKEN_SECONDS: i64 = 3607;
/// The characters of generated name suffixes (no vowels, no look-alikes), as apimachinery's.
const SUFFIX_CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

pub fn admit(req: &ApiRequest, operation: &mut Operation<'_>) -> Result<(), ApiError> {
    let info = req.info();
    if !(info.group.is_empty() && info.plural == "pods") || req.target.subresource.is_some() {
        return Ok(());
    }
    let Operation::Create { object } = operation else {
        return Ok(());
    };
    let mirror = object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(MIRROR_ANNOTATION))
        .is_some();
    if mirror {
        return Ok(());
    }
    let namespace = req.target.namespace.clone().unwrap_or_default();
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    let account = spec
        .get("serviceAccountName")
        .or_else(|| spec.get("serviceAccount"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .unwrap_or("default")
        .to_string();
    spec.insert("serviceAccountName".into(), json!(account));
    let account_automount = req
        .ctx
        .store
        .get(&ObjectKey::new(
            "serviceaccounts",
            namespace.as_str(),
            account.as_str(),
        ))
        .and_then(|sa| sa.value().get("automountServiceAccountToken")?.as_bool());
    let automount = spec
        .get("automountServiceAccountToken")
        .and_then(Value::as_bool)
        .or(account_automount)
        .unwrap_or(true);
    if automount {
        mount_token_volume(spec);
    }
    Ok(())
}

/// Adds the volume and its mounts where nothing is mounted at [`MOUNT_PATH`].
fn mount_token_volume(spec: &mut Map<String, Value>) {
    let existing = spec
        .get("volumes")
        .and_then(Value::as_array)
        .and_then(|volumes| {
            volumes.iter().find_map(|v| {
                let name = v.get("name")?.as_str()?;
                name.starts_with(VOLUME_PREFIX).then(|| name.to_string())
            })
        });
    let volume = existing.clone().unwrap_or_else(|| {
        let mut rng = rand::thread_rng();
        let suffix: String = (0..5)
            .map(|_| SUFFIX_CHARS[rng.gen_range(0..SUFFIX_CHARS.len())] as char)
            .collect();
        format!("{VOLUME_PREFIX}{suffix}")
    });
    let mut mounted = false;
    for group in ["initContainers", "containers"] {
        let Some(containers) = spec.get_mut(group).and_then(Value::as_array_mut) else {
            continue;
        };
        for container in containers.iter_mut().filter_map(Value::as_object_mut) {
            let mounts = container.entry("volumeMounts").or_insert_with(|| json!([]));
            let Some(mounts) = mounts.as_array_mut() else {
                continue;
            };
            let taken = mounts
                .iter()
                .any(|m| m.get("mountPath").and_then(Value::as_str) == Some(MOUNT_PATH));
            if !taken {
                mounts.push(json!({"name": volume, "readOnly": true, "mountPath": MOUNT_PATH}));
                mounted = true;
            }
        }
    }
    if mounted && existing.is_none() {
        let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
        if let Some(volumes) = volumes.as_array_mut() {
            volumes.push(json!({
                "name": volume,
                "projected": {
                    "defaultMode": 420,
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": TOKEN_SECONDS, "path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt",
                                       "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef":
                            {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                    ],
                },
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn every_container_gets_the_volume_once() {
        let mut s = spec(json!({
            "initContainers": [{"name": "i"}],
            "containers": [{"name": "a"}, {"name": "b", "volumeMounts": [
                {"name": "own", "mountPath": MOUNT_PATH}]}],
        }));
        mount_token_volume(&mut s);
        let volumes = s["volumes"].as_array().unwrap();
        assert_eq!(volumes.len(), 1);
        let name = volumes[0]["name"].as_str().unwrap();
        assert!(name.starts_with(VOLUME_PREFIX) && name.len() == VOLUME_PREFIX.len() + 5);
        assert_eq!(s["initContainers"][0]["volumeMounts"][0]["name"], name);
        assert_eq!(
            s["containers"][0]["volumeMounts"][0]["mountPath"],
            MOUNT_PATH
        );
        assert_eq!(
            s["containers"][1]["volumeMounts"].as_array().unwrap().len(),
            1
        );
        // Admitting the same spec again (a copied pod) adds nothing.
        let before = s.clone();
        mount_token_volume(&mut s);
        assert_eq!(s, before);
    }

    #[test]
    fn nothing_is_added_where_every_container_has_its_own() {
        let mut s = spec(json!({"containers": [{"name": "a", "volumeMounts": [
            {"name": "own", "mountPath": MOUNT_PATH}]}]}));
        mount_token_volume(&mut s);
        assert!(s.get("volumes").is_none());
    }
}
