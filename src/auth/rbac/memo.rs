//! Remembered RBAC decisions: the reason of each request RBAC allowed, by the caller's name
//! and groups and the request's method, path and query, for as long as the RBAC objects do
//! not change.
//!
//! A client repeats the same few requests (a controller's GETs and lists, a kubelet's status
//! writes): asking RBAC again costs reading the request's attributes and walking the
//! caller's bindings each time. The memo belongs to one [`Index`](super::index::Index): any
//! RBAC write the index takes in clears it, and a rebuilt index starts with an empty one, so a
//! remembered answer is always one the current objects give. Only allowing decisions are kept
//! (a refusal needs the request's attributes for its message, and is rare on a hot path), and
//! only RBAC's own: the Node authorizer reads pods, which change without RBAC knowing.
//!
//! Bounded by [`CAPACITY`] entries (about 300 bytes each); when full it starts over, so an
//! unbounded variety of paths (every object's name) costs a recomputation, never memory.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::Arc;

use http::Method;
use parking_lot::Mutex;

use crate::auth::user::UserInfo;

/// Most requests remembered at once.
pub const CAPACITY: usize = 1024;

/// One remembered request: everything a decision was made from, compared in full on a hit
/// (the map's key is only a hash).
struct Remembered {
    user: String,
    groups: Vec<String>,
    method: Method,
    path: String,
    query: String,
    reason: Arc<str>,
}

impl Remembered {
    fn is(&self, request: &Request<'_>) -> bool {
        self.method == *request.method
            && self.path == request.path
            && self.query == request.query.unwrap_or("")
            && self.user == request.user.name
            && self.groups == request.user.groups
    }
}

/// The request a decision is asked for, as the memo sees it.
pub struct Request<'a> {
    pub user: &'a UserInfo,
    pub method: &'a Method,
    pub path: &'a str,
    pub query: Option<&'a str>,
}

impl Request<'_> {
    fn hash_with(&self, state: &RandomState) -> u64 {
        let mut hasher = state.build_hasher();
        self.user.name.hash(&mut hasher);
        self.user.groups.hash(&mut hasher);
        self.method.hash(&mut hasher);
        self.path.hash(&mut hasher);
        self.query.unwrap_or("").hash(&mut hasher);
        hasher.finish()
    }
}

/// The allowing decisions of one index.
#[derive(Default)]
pub struct DecisionMemo {
    hashes: RandomState,
    entries: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    by_hash: HashMap<u64, Vec<Remembered>>,
    count: usize,
}

impl DecisionMemo {
    /// The reason RBAC gave when it allowed `request` before, if it did.
    pub fn allowed(&self, request: &Request<'_>) -> Option<Arc<str>> {
        let hash = request.hash_with(&self.hashes);
        let entries = self.entries.lock();
        entries
            .by_hash
            .get(&hash)?
            .iter()
            .find(|entry| entry.is(request))
            .map(|entry| entry.reason.clone())
    }

    /// Remembers that RBAC allowed `request` for `reason`.
    pub fn remember(&self, request: &Request<'_>, reason: Arc<str>) {
        let hash = request.hash_with(&self.hashes);
        let mut entries = self.entries.lock();
        if entries.count >= CAPACITY {
            *entries = Entries::default();
        }
        let same_hash = entries.by_hash.entry(hash).or_default();
        if same_hash.iter().any(|entry| entry.is(request)) {
            return;
        }
        same_hash.push(Remembered {
            user: request.user.name.clone(),
            groups: request.user.groups.clone(),
            method: request.method.clone(),
            path: request.path.to_string(),
            query: request.query.unwrap_or("").to_string(),
            reason,
        });
        entries.count += 1;
    }

    /// Forgets everything: the RBAC objects changed.
    pub fn clear(&mut self) {
        *self.entries.get_mut() = Entries::default();
    }

    /// How many requests are remembered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.lock().count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request<'a>(user: &'a UserInfo, path: &'a str, query: Option<&'a str>) -> Request<'a> {
        Request {
            user,
            method: &Method::GET,
            path,
            query,
        }
    }

    #[test]
    fn a_hit_needs_every_part_of_the_request_to_match() {
        let memo = DecisionMemo::default();
        let alice = UserInfo::new("alice", &["dev", "system:authenticated"]);
        let path = "/api/v1/namespaces/a/pods";
        memo.remember(
            &request(&alice, path, None),
            Arc::from("RBAC: allowed by x"),
        );
        assert_eq!(
            memo.allowed(&request(&alice, path, None)).as_deref(),
            Some("RBAC: allowed by x")
        );
        // Another query (a watch), path, method, name or group set is another request.
        assert!(memo
            .allowed(&request(&alice, path, Some("watch=1")))
            .is_none());
        assert!(memo
            .allowed(&request(&alice, "/api/v1/namespaces/b/pods", None))
            .is_none());
        let post = Request {
            method: &Method::POST,
            ..request(&alice, path, None)
        };
        assert!(memo.allowed(&post).is_none());
        let bob = UserInfo::new("bob", &["dev", "system:authenticated"]);
        assert!(memo.allowed(&request(&bob, path, None)).is_none());
        let alice_elsewhere = UserInfo::new("alice", &["ops", "system:authenticated"]);
        assert!(memo
            .allowed(&request(&alice_elsewhere, path, None))
            .is_none());
        // The same request again is kept once.
        memo.remember(
            &request(&alice, path, None),
            Arc::from("RBAC: allowed by x"),
        );
        assert_eq!(memo.len(), 1);
    }

    #[test]
    fn it_starts_over_when_full_and_when_cleared() {
        let mut memo = DecisionMemo::default();
        let alice = UserInfo::new("alice", &[]);
        let paths: Vec<String> = (0..=CAPACITY).map(|i| format!("/api/v1/x{i}")).collect();
        for path in &paths[..CAPACITY] {
            memo.remember(&request(&alice, path, None), Arc::from("r"));
        }
        assert_eq!(memo.len(), CAPACITY);
        memo.remember(&request(&alice, &paths[CAPACITY], None), Arc::from("r"));
        assert_eq!(memo.len(), 1, "a full memo starts over");
        assert!(memo.allowed(&request(&alice, &paths[0], None)).is_none());
        assert!(memo
            .allowed(&request(&alice, &paths[CAPACITY], None))
            .is_some());
        memo.clear();
        assert_eq!(memo.len(), 0);
    }
}
