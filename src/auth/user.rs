//! Who a request acts as: the user an authenticator produced (kube-apiserver's `user.Info`),
//! and the well-known names and groups the rest of the server relies on.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The group of callers with every permission, whatever RBAC says (kube-apiserver's
/// privileged group: its own loopback user and the admin credential are in it).
pub const MASTERS: &str = "system:masters";
/// The group every authenticated user is in.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The group of the anonymous user.
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
/// The user of a request that presented no credential.
pub const ANONYMOUS: &str = "system:anonymous";
/// The group of node credentials (`system:node:<name>`).
pub const NODES: &str = "system:nodes";
/// The prefix of a service account's user name: `system:serviceaccount:<namespace>:<name>`.
pub const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";
/// The group of every service account.
pub const SERVICE_ACCOUNTS: &str = "system:serviceaccounts";

/// An authenticated (or anonymous) caller: name, uid, groups and extra attributes, as
/// kube-apiserver's authenticators produce them and SelfSubjectReview reports them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserInfo {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Shared between copies: a service account's token carries its credential id here, and
    /// every request copies the user the token names.
    #[serde(default, skip_serializing_if = "Extra::is_empty")]
    pub extra: Arc<Extra>,
}

/// A user's extra attributes: key → values.
pub type Extra = BTreeMap<String, Vec<String>>;

impl UserInfo {
    /// A user with `name` in `groups` (no uid, no extra).
    pub fn new(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.to_string(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..UserInfo::default()
        }
    }

    /// The holder of the admin token (the admin kubeconfig).
    pub fn admin() -> UserInfo {
        UserInfo::new("admin", &[MASTERS, AUTHENTICATED])
    }

    /// A caller without credentials.
    pub fn anonymous() -> UserInfo {
        UserInfo::new(ANONYMOUS, &[UNAUTHENTICATED])
    }

    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    /// Whether the user may do anything without asking RBAC.
    pub fn is_master(&self) -> bool {
        self.in_group(MASTERS)
    }

    /// Adds `system:authenticated` unless the user is anonymous or already has it, as
    /// kube-apiserver's authentication does for every authenticated user.
    pub fn with_authenticated_group(mut self) -> UserInfo {
        if self.name != ANONYMOUS
            && !self.in_group(AUTHENTICATED)
            && !self.in_group(UNAUTHENTICATED)
        {
            self.groups.push(AUTHENTICATED.to_string());
        }
        self
    }
}

/// `system:serviceaccount:<namespace>:<name>`.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}")
}

/// The (namespace, name) of a service account's user name.
pub fn service_account_of(user: &str) -> Option<(&str, &str)> {
    let rest = user.strip_prefix(SERVICE_ACCOUNT_PREFIX)?;
    let (namespace, name) = rest.split_once(':')?;
    (!namespace.is_empty() && !name.is_empty() && !name.contains(':')).then_some((namespace, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authenticated_group_is_added_once() {
        let user = UserInfo::new("u", &["g"]).with_authenticated_group();
        assert_eq!(user.groups, ["g", AUTHENTICATED]);
        assert_eq!(user.clone().with_authenticated_group(), user);
        let anonymous = UserInfo::anonymous().with_authenticated_group();
        assert_eq!(anonymous.groups, [UNAUTHENTICATED]);
    }

    #[test]
    fn service_account_names() {
        assert_eq!(
            service_account_user("ns", "sa"),
            "system:serviceaccount:ns:sa"
        );
        assert_eq!(
            service_account_of("system:serviceaccount:ns:sa"),
            Some(("ns", "sa"))
        );
        for bad in [
            "system:serviceaccount:ns",
            "system:serviceaccount::sa",
            "alice",
        ] {
            assert_eq!(service_account_of(bad), None, "{bad}");
        }
    }
}
