//! The CSR approver (kube-controller-manager's `csrapproving`): a request for a node client
//! certificate (signer `kubernetes.io/kube-apiserver-client-kubelet`, subject
//! `system:node:<name>` in `system:nodes`, no subject alternative names, client usages) is
//! approved when its requestor may ask for it:
//!
//! - `selfnodeclient`: the requestor is that node itself (its user is the subject's common
//!   name; a node renewing its own certificate), and holds `create` on
//!   `certificatesigningrequests/selfnodeclient`;
//! - `nodeclient`: any other requestor holding `create` on
//!   `certificatesigningrequests/nodeclient` (upstream, bootstrap tokens; no such binding is
//!   made by default).
//!
//! The question is a SubjectAccessReview for the requestor recorded in the request (user,
//! uid, groups, extra), as upstream asks it. Requests it does not recognize or may not
//! approve stay pending for a person or another approver; none is denied.

use std::sync::Arc;

use serde_json::{json, Value};

use super::informer::{Change, Informers, InformersBuilder, KindCache};
use super::queue::WorkQueue;
use super::worker::{Controller, Outcome, ReconcileError};
use super::Shared;
use crate::api::certificates::{self, has_condition, ParsedRequest, KUBE_APISERVER_CLIENT_KUBELET};
use crate::api::meta::now_rfc3339;
use crate::client::Client;
use crate::kube::resources::{self, ResourceInfo};

const RESOURCE: &str = "certificates.k8s.io/certificatesigningrequests";

pub struct CsrApprover {
    client: Client,
    requests: Arc<KindCache>,
}

fn find(group: &str, plural: &str) -> &'static ResourceInfo {
    resources::find(group, "v1", plural)
        .unwrap_or_else(|| panic!("built-in kind {plural} is not registered"))
}

/// Which approval a request would be: the subresource its requestor must be allowed to
/// create, and the condition's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    SelfNodeClient,
    NodeClient,
}

impl Kind {
    fn subresource(self) -> &'static str {
        match self {
            Kind::SelfNodeClient => "selfnodeclient",
            Kind::NodeClient => "nodeclient",
        }
    }

    fn message(self) -> &'static str {
        match self {
            Kind::SelfNodeClient => {
                "Auto approving self kubelet client certificate after SubjectAccessReview."
            }
            Kind::NodeClient => {
                "Auto approving kubelet client certificate after SubjectAccessReview."
            }
        }
    }
}

/// kube-controller-manager's recognizers: a node client certificate request, and whether
/// its requestor is the node it names.
fn recognize(csr: &Value, parsed: &ParsedRequest) -> Option<Kind> {
    let signer = csr.pointer("/spec/signerName").and_then(Value::as_str);
    if signer != Some(KUBE_APISERVER_CLIENT_KUBELET)
        || parsed.organizations != ["system:nodes"]
        || !parsed.common_name.starts_with("system:node:")
        || parsed.dns_names + parsed.ip_addresses + parsed.email_addresses + parsed.uris > 0
    {
        return None;
    }
    let mut usages: Vec<&str> = csr
        .pointer("/spec/usages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    usages.sort_unstable();
    usages.dedup();
    let client = [
        &["client auth", "digital signature"][..],
        &["client auth", "digital signature", "key encipherment"][..],
    ];
    if !client.contains(&usages.as_slice()) {
        return None;
    }
    let requestor = csr.pointer("/spec/username").and_then(Value::as_str);
    Some(if requestor == Some(parsed.common_name.as_str()) {
        Kind::SelfNodeClient
    } else {
        Kind::NodeClient
    })
}

impl Controller for CsrApprover {
    /// The request's name.
    type Key = String;
    const NAME: &'static str = "csrapproving";
    const WORKERS: usize = 1;

    fn register(builder: &mut InformersBuilder, queue: &WorkQueue<String>) {
        let q = queue.clone();
        builder.on_change(
            RESOURCE,
            Arc::new(move |change: Change<'_>| {
                if !matches!(change, Change::Deleted(_)) {
                    q.add(change.object().key.name.clone());
                }
            }),
        );
    }

    fn new(shared: &Shared, informers: &Arc<Informers>, _queue: WorkQueue<String>) -> Self {
        CsrApprover {
            client: shared.controller_manager.clone(),
            requests: informers.cache(RESOURCE).expect("registered in `register`"),
        }
    }

    async fn reconcile(&self, name: &String) -> Result<Outcome, ReconcileError> {
        let Some(current) = self.requests.get("", name) else {
            return Ok(Outcome::Done);
        };
        let mut csr = current.value();
        let decided = ["Approved", "Denied", "Failed"]
            .iter()
            .any(|c| has_condition(&csr, c));
        let issued = csr
            .pointer("/status/certificate")
            .and_then(Value::as_str)
            .is_some_and(|c| !c.is_empty());
        if decided || issued {
            return Ok(Outcome::Done);
        }
        let Some(parsed) = certificates::request_bytes(&csr)
            .and_then(|bytes| certificates::parse_request(&bytes).ok())
        else {
            return Ok(Outcome::Done);
        };
        let Some(kind) = recognize(&csr, &parsed) else {
            return Ok(Outcome::Done);
        };
        if !self.allowed(&csr, kind).await? {
            return Ok(Outcome::Done);
        }
        let condition = json!({
            "type": "Approved",
            "status": "True",
            "reason": "AutoApproved",
            "message": kind.message(),
            "lastUpdateTime": now_rfc3339(),
        });
        match csr
            .pointer_mut("/status/conditions")
            .and_then(Value::as_array_mut)
        {
            Some(list) => list.push(condition),
            None => csr["status"]["conditions"] = json!([condition]),
        }
        let info = find("certificates.k8s.io", "certificatesigningrequests");
        let path = crate::client::object_path(info, "", name, Some("approval"));
        let body = bytes::Bytes::from(serde_json::to_vec(&csr).unwrap_or_default());
        match self
            .client
            .send(http::Method::PUT, &path, "application/json", body)
            .await
        {
            Ok(_) => Ok(Outcome::Done),
            // Deleted meanwhile; a conflict brings a newer version, queued by its change.
            Err(e) if e.is_not_found() || e.is_conflict() => Ok(Outcome::Done),
            Err(e) => Err(e.into()),
        }
    }
}

impl CsrApprover {
    /// Whether the request's requestor may create the subresource of `kind`.
    async fn allowed(&self, csr: &Value, kind: Kind) -> Result<bool, ReconcileError> {
        let spec = csr.get("spec").cloned().unwrap_or_default();
        let mut review = json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": spec.get("username").cloned().unwrap_or_default(),
                "groups": spec.get("groups").cloned().unwrap_or_else(|| json!([])),
                "resourceAttributes": {
                    "group": "certificates.k8s.io",
                    "resource": "certificatesigningrequests",
                    "verb": "create",
                    "subresource": kind.subresource(),
                },
            },
        });
        for field in ["uid", "extra"] {
            if let Some(value) = spec.get(field).filter(|v| !v.is_null()) {
                review["spec"][field] = value.clone();
            }
        }
        let answer = self
            .client
            .create(
                find("authorization.k8s.io", "subjectaccessreviews"),
                "",
                &review,
            )
            .await?;
        Ok(answer.pointer("/status/allowed").and_then(Value::as_bool) == Some(true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(cn: &str, orgs: &[&str]) -> ParsedRequest {
        ParsedRequest {
            common_name: cn.into(),
            organizations: orgs.iter().map(|o| o.to_string()).collect(),
            public_key_der: Vec::new(),
            dns_names: 0,
            ip_addresses: 0,
            email_addresses: 0,
            uris: 0,
        }
    }

    fn csr(user: &str, usages: &[&str]) -> Value {
        json!({"spec": {"signerName": KUBE_APISERVER_CLIENT_KUBELET, "username": user,
            "usages": usages}})
    }

    #[test]
    fn node_requests_are_recognized_by_who_asks() {
        let usages = ["digital signature", "client auth"];
        let n1 = parsed("system:node:n1", &["system:nodes"]);
        assert_eq!(
            recognize(&csr("system:node:n1", &usages), &n1),
            Some(Kind::SelfNodeClient)
        );
        // Another node, or anyone else, asking for n1's certificate is not n1 renewing.
        assert_eq!(
            recognize(&csr("system:node:n2", &usages), &n1),
            Some(Kind::NodeClient)
        );
        assert_eq!(
            recognize(&csr("alice", &usages), &n1),
            Some(Kind::NodeClient)
        );
        // Not a node client certificate.
        assert_eq!(
            recognize(
                &csr("system:node:n1", &["server auth", "digital signature"]),
                &n1
            ),
            None
        );
        assert_eq!(
            recognize(&csr("alice", &usages), &parsed("alice", &["system:nodes"])),
            None
        );
        assert_eq!(
            recognize(
                &csr("system:node:n1", &usages),
                &parsed("system:node:n1", &["admins"])
            ),
            None
        );
        let mut other = csr("system:node:n1", &usages);
        other["spec"]["signerName"] = json!("kubernetes.io/kube-apiserver-client");
        assert_eq!(recognize(&other, &n1), None);
    }
}
