//! RBAC's escalation prevention, as kube-apiserver's RBAC storage applies it
//! (pkg/registry/rbac): a Role or ClusterRole may be written only with rules its writer holds
//! (or with the `escalate` verb on it), and a binding only to a role whose rules its writer
//! holds (or with the `bind` verb on that role). Members of `system:masters` may write
//! anything. An aggregationRule can gather any rule, so setting one needs every permission.

use super::rule::{compact, uncovered, PolicyRule};
use super::{Authorizer, RulesFor};
use crate::auth::attributes::RequestInfo;
use crate::auth::messages::{go_quote, go_quote_list};
use crate::auth::user::UserInfo;

/// The RBAC API group.
pub const GROUP: &str = "rbac.authorization.k8s.io";

/// Whether the user may write any RBAC object (kube-apiserver's `EscalationAllowed`).
pub fn escalation_allowed(user: &UserInfo) -> bool {
    user.is_master()
}

/// Whether `user` holds `verb` (`escalate` or `bind`) on the role `resource`
/// (`roles`/`clusterroles`) named `name` in `namespace`.
pub fn verb_on_role(
    authorizer: &Authorizer,
    user: &UserInfo,
    verb: &str,
    resource: &str,
    namespace: &str,
    name: &str,
) -> bool {
    let info = RequestInfo {
        resource_request: true,
        verb: verb.to_string(),
        api_group: GROUP.to_string(),
        api_version: "*".to_string(),
        resource: resource.to_string(),
        namespace: namespace.to_string(),
        name: name.to_string(),
        ..RequestInfo::default()
    };
    authorizer.authorize(user, &info).allowed()
}

/// Refuses `rules` unless `user` holds all of them in `namespace` (cluster-wide when empty),
/// with kube-apiserver's message naming the missing ones.
pub fn confirm_no_escalation(
    authorizer: &Authorizer,
    user: &UserInfo,
    namespace: &str,
    rules: &[PolicyRule],
) -> Result<(), String> {
    let RulesFor {
        rules: held,
        errors,
    } = authorizer.rules_for(user, namespace);
    let missing = uncovered(&held, rules);
    if missing.is_empty() {
        return Ok(());
    }
    let mut descriptions: Vec<String> = compact(missing)
        .iter()
        .map(PolicyRule::compact_string)
        .collect();
    descriptions.sort();
    descriptions.dedup();
    let mut message = format!(
        "user {} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        go_quote(&user.name),
        go_quote_list(&user.groups),
        descriptions.join("\n")
    );
    if !errors.is_empty() {
        message.push_str(&format!("; resolution errors: [{}]", errors.join(" ")));
    }
    Err(message)
}

/// Every permission there is: what setting an aggregationRule requires.
pub fn full_authority() -> Vec<PolicyRule> {
    vec![
        PolicyRule::resource(&["*"], &["*"], &["*"]),
        PolicyRule::urls(&["*"], &["*"]),
    ]
}
