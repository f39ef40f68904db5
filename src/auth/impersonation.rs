//! Impersonation (`Impersonate-User`, `Impersonate-Group`, `Impersonate-Uid`,
//! `Impersonate-Extra-<key>`), as kube-apiserver's impersonation filter handles it: each thing
//! asked for is authorized for the caller with the verb `impersonate` (on `users`, `groups`,
//! `serviceaccounts` in their namespace, `uids` and `userextras/<key>` of
//! `authentication.k8s.io`), and the request then acts as the user built from the headers:
//! a service account gets its groups unless groups are given, and every user but
//! `system:anonymous` is in `system:authenticated` unless `system:unauthenticated` is asked.

use std::collections::BTreeMap;

use http::HeaderMap;
use percent_encoding::percent_decode_str;

use super::attributes::RequestInfo;
use super::rbac::{Authorizer, Decision};
use super::user::{
    self, service_account_of, UserInfo, ANONYMOUS, AUTHENTICATED, SERVICE_ACCOUNTS, UNAUTHENTICATED,
};

pub const USER_HEADER: &str = "impersonate-user";
pub const GROUP_HEADER: &str = "impersonate-group";
pub const UID_HEADER: &str = "impersonate-uid";
pub const EXTRA_HEADER_PREFIX: &str = "impersonate-extra-";

/// Why a request may not act as the user it asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The headers do not make a user (groups, uid or extras without a user): kube-apiserver
    /// answers 500 with this text.
    Malformed(String),
    /// `caller` may not impersonate `what` (the attributes of the check, for the 403 text).
    Forbidden {
        caller: String,
        what: Box<RequestInfo>,
        reason: String,
    },
}

/// One thing a request asks to impersonate.
enum Wanted {
    User(String),
    ServiceAccount { namespace: String, name: String },
    Group(String),
    Extra { key: String, value: String },
    Uid(String),
}

impl Wanted {
    /// The attributes authorized for it (verb `impersonate`).
    fn attributes(&self) -> RequestInfo {
        let base = RequestInfo {
            resource_request: true,
            verb: "impersonate".into(),
            ..RequestInfo::default()
        };
        match self {
            Wanted::User(name) => RequestInfo {
                resource: "users".into(),
                name: name.clone(),
                ..base
            },
            Wanted::ServiceAccount { namespace, name } => RequestInfo {
                api_version: "v1".into(),
                resource: "serviceaccounts".into(),
                namespace: namespace.clone(),
                name: name.clone(),
                ..base
            },
            Wanted::Group(name) => RequestInfo {
                resource: "groups".into(),
                name: name.clone(),
                ..base
            },
            Wanted::Extra { key, value } => RequestInfo {
                api_group: "authentication.k8s.io".into(),
                api_version: "v1".into(),
                resource: "userextras".into(),
                subresource: key.clone(),
                name: value.clone(),
                ..base
            },
            Wanted::Uid(uid) => RequestInfo {
                api_group: "authentication.k8s.io".into(),
                api_version: "v1".into(),
                resource: "uids".into(),
                name: uid.clone(),
                ..base
            },
        }
    }
}

fn header_values<'a>(headers: &'a HeaderMap, name: &str) -> impl Iterator<Item = String> + 'a {
    headers
        .get_all(name)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Whether the request carries any impersonation header.
pub fn requested(headers: &HeaderMap) -> bool {
    headers
        .keys()
        .any(|name| name.as_str().starts_with("impersonate-"))
}

/// The user the request acts as: `caller` without impersonation headers, else the
/// impersonated user once every part of it is authorized for `caller`.
pub fn resolve(
    authorizer: &Authorizer,
    caller: UserInfo,
    headers: &HeaderMap,
) -> Result<UserInfo, Refused> {
    if !requested(headers) {
        return Ok(caller);
    }
    let mut wanted = Vec::new();
    let requested_user = header_values(headers, USER_HEADER)
        .next()
        .unwrap_or_default();
    let has_user = !requested_user.is_empty();
    if has_user {
        wanted.push(match service_account_of(&requested_user) {
            Some((namespace, name)) => Wanted::ServiceAccount {
                namespace: namespace.to_string(),
                name: name.to_string(),
            },
            None => Wanted::User(requested_user.clone()),
        });
    }
    let groups_given: Vec<String> = header_values(headers, GROUP_HEADER).collect();
    wanted.extend(groups_given.iter().cloned().map(Wanted::Group));
    let mut extra_names: Vec<&str> = headers
        .keys()
        .map(|k| k.as_str())
        .filter(|k| k.starts_with(EXTRA_HEADER_PREFIX))
        .collect();
    extra_names.sort_unstable();
    extra_names.dedup();
    for header in &extra_names {
        let encoded = &header[EXTRA_HEADER_PREFIX.len()..];
        let key = percent_decode_str(encoded)
            .decode_utf8()
            .map(|k| k.into_owned())
            .unwrap_or_else(|_| encoded.to_string());
        for value in header_values(headers, header) {
            wanted.push(Wanted::Extra {
                key: key.clone(),
                value,
            });
        }
    }
    let uid = header_values(headers, UID_HEADER)
        .next()
        .unwrap_or_default();
    if !uid.is_empty() {
        wanted.push(Wanted::Uid(uid.clone()));
    }
    if !has_user {
        if wanted.is_empty() {
            return Ok(caller);
        }
        return Err(Refused::Malformed(
            "requested impersonation of groups, a uid or extras without impersonating a user"
                .into(),
        ));
    }

    let mut name = String::new();
    let mut groups: Vec<String> = Vec::new();
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for item in &wanted {
        let what = item.attributes();
        if let Decision::Deny(reason) = authorizer.authorize(&caller, &what) {
            return Err(Refused::Forbidden {
                caller: caller.name.clone(),
                what: Box::new(what),
                reason,
            });
        }
        match item {
            Wanted::User(user) => name = user.clone(),
            Wanted::ServiceAccount {
                namespace,
                name: account,
            } => {
                name = user::service_account_user(namespace, account);
                if groups_given.is_empty() {
                    groups.push(SERVICE_ACCOUNTS.to_string());
                    groups.push(format!("{SERVICE_ACCOUNTS}:{namespace}"));
                }
            }
            Wanted::Group(group) => groups.push(group.clone()),
            Wanted::Extra { key, value } => {
                extra.entry(key.clone()).or_default().push(value.clone())
            }
            Wanted::Uid(_) => {}
        }
    }
    if name != ANONYMOUS {
        if !groups
            .iter()
            .any(|g| g == AUTHENTICATED || g == UNAUTHENTICATED)
        {
            groups.push(AUTHENTICATED.to_string());
        }
    } else if !groups.iter().any(|g| g == UNAUTHENTICATED) {
        groups.push(UNAUTHENTICATED.to_string());
    }
    tracing::debug!(
        component = "auth",
        caller = %caller.name,
        user = %name,
        "impersonating"
    );
    Ok(UserInfo {
        name,
        uid,
        groups,
        extra: extra.into(),
    })
}
