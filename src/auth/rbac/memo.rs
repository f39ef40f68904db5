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
//! Bounded by [`CAPACITY`] entries (about 200 bytes each); when full, one entry makes room
//! for the next, so an unbounded variety of paths (every object's name) costs recomputations,
//! never memory.

use std::collections::HashMap;
use std::sync::Arc;

use http::Method;
use parking_lot::Mutex;

use crate::auth::user::UserInfo;

/// Most requests remembered at once.
pub const CAPACITY: usize = 1024;

/// The request a decision is asked for, as the memo sees it.
pub struct Request<'a> {
    pub user: &'a UserInfo,
    pub method: &'a Method,
    pub path: &'a str,
    pub query: Option<&'a str>,
}

impl Request<'_> {
    /// What a decision is made from, in one string: the user's name, each group, the method,
    /// the path and the query, each followed by a NUL. `None` when a part holds a NUL itself
    /// (a path, query and method cannot; a name or group from a client certificate or the
    /// token file could): its key could be another request's, so it is never remembered.
    fn key(&self) -> Option<String> {
        let parts = || {
            std::iter::once(self.user.name.as_str())
                .chain(self.user.groups.iter().map(String::as_str))
                .chain([self.method.as_str(), self.path, self.query.unwrap_or("")])
        };
        let mut key = String::with_capacity(parts().map(|part| part.len() + 1).sum());
        for part in parts() {
            if part.contains('\0') {
                return None;
            }
            key.push_str(part);
            key.push('\0');
        }
        Some(key)
    }
}

/// The allowing decisions of one index: each request's key and the reason RBAC gave.
#[derive(Default)]
pub struct DecisionMemo {
    entries: Mutex<HashMap<Box<str>, Arc<str>>>,
}

impl DecisionMemo {
    /// The reason RBAC gave when it allowed `request` before, if it did.
    pub fn allowed(&self, request: &Request<'_>) -> Option<Arc<str>> {
        let key = request.key()?;
        self.entries.lock().get(key.as_str()).cloned()
    }

    /// Remembers that RBAC allowed `request` for `reason`. A full memo forgets one entry
    /// first, whichever the map yields first.
    pub fn remember(&self, request: &Request<'_>, reason: Arc<str>) {
        let Some(key) = request.key() else {
            return;
        };
        let mut entries = self.entries.lock();
        if entries.contains_key(key.as_str()) {
            return;
        }
        if entries.len() >= CAPACITY {
            let first = entries.keys().next().cloned();
            if let Some(first) = first {
                entries.remove(&first);
            }
        }
        entries.insert(key.into_boxed_str(), reason);
    }

    /// Forgets everything: the RBAC objects changed.
    pub fn clear(&mut self) {
        self.entries.get_mut().clear();
    }

    /// How many requests are remembered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.lock().len()
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
    fn a_full_memo_makes_room_and_a_cleared_one_is_empty() {
        let mut memo = DecisionMemo::default();
        let alice = UserInfo::new("alice", &[]);
        let paths: Vec<String> = (0..CAPACITY + 10)
            .map(|i| format!("/api/v1/x{i}"))
            .collect();
        for path in &paths {
            memo.remember(&request(&alice, path, None), Arc::from("r"));
        }
        assert_eq!(memo.len(), CAPACITY);
        let held = paths
            .iter()
            .filter(|path| memo.allowed(&request(&alice, path, None)).is_some())
            .count();
        assert_eq!(held, CAPACITY);
        assert!(memo
            .allowed(&request(&alice, &paths[CAPACITY + 9], None))
            .is_some());
        memo.clear();
        assert_eq!(memo.len(), 0);
        assert!(memo.allowed(&request(&alice, &paths[0], None)).is_none());
    }

    #[test]
    fn parts_cannot_pass_for_one_another() {
        let memo = DecisionMemo::default();
        // The same strings, cut differently: a name holding the separator is never asked
        // about nor remembered.
        let joined = UserInfo::new("alice\0dev", &[]);
        let split = UserInfo::new("alice", &["dev"]);
        memo.remember(&request(&split, "/api", None), Arc::from("r"));
        assert!(memo.allowed(&request(&joined, "/api", None)).is_none());
        memo.remember(&request(&joined, "/x", None), Arc::from("r"));
        assert_eq!(memo.len(), 1);
    }
}
