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
use std::hash::{BuildHasher, Hasher, RandomState};
use std::sync::Arc;

use http::Method;
use parking_lot::Mutex;

use crate::auth::user::UserInfo;

/// Most requests remembered at once.
pub const CAPACITY: usize = 1024;

/// One remembered request: everything a decision was made from, compared in full on a hit
/// (the map's key is only a hash), in one allocation: the user's name, each group, the
/// method, the path and the query, each followed by a NUL. None of them holds a NUL (a
/// request whose user does is never remembered), so the key reads back as exactly one list.
struct Remembered {
    key: Box<str>,
    reason: Arc<str>,
}

impl Remembered {
    fn is(&self, request: &Request<'_>) -> bool {
        let mut rest = self.key.as_ref();
        request.parts().all(|part| {
            match rest
                .strip_prefix(part)
                .and_then(|after| after.strip_prefix('\0'))
            {
                Some(after) => {
                    rest = after;
                    true
                }
                None => false,
            }
        }) && rest.is_empty()
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
    /// What a decision is made from, in order: the user's name, its groups, the method, the
    /// path and the query.
    fn parts(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.user.name.as_str())
            .chain(self.user.groups.iter().map(String::as_str))
            .chain([self.method.as_str(), self.path, self.query.unwrap_or("")])
    }

    /// Whether the request can be told apart from every other by its key: none of its parts
    /// holds the separator. (A path, query and method cannot; a name or group from a client
    /// certificate or the token file could.)
    fn rememberable(&self) -> bool {
        self.parts().all(|part| !part.contains('\0'))
    }

    fn hash_with(&self, state: &RandomState) -> u64 {
        let mut hasher = state.build_hasher();
        for part in self.parts() {
            hasher.write(part.as_bytes());
            hasher.write_u8(0);
        }
        hasher.finish()
    }

    fn key(&self) -> Box<str> {
        let mut key = String::with_capacity(self.parts().map(|p| p.len() + 1).sum());
        for part in self.parts() {
            key.push_str(part);
            key.push('\0');
        }
        key.into_boxed_str()
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

impl Entries {
    fn forget_one(&mut self) {
        let Some(&hash) = self.by_hash.keys().next() else {
            return;
        };
        if let Some(same) = self.by_hash.get_mut(&hash) {
            same.pop();
            self.count -= 1;
            if same.is_empty() {
                self.by_hash.remove(&hash);
            }
        }
    }
}

impl DecisionMemo {
    /// The reason RBAC gave when it allowed `request` before, if it did.
    pub fn allowed(&self, request: &Request<'_>) -> Option<Arc<str>> {
        if !request.rememberable() {
            return None;
        }
        let hash = request.hash_with(&self.hashes);
        let entries = self.entries.lock();
        entries
            .by_hash
            .get(&hash)?
            .iter()
            .find(|entry| entry.is(request))
            .map(|entry| entry.reason.clone())
    }

    /// Remembers that RBAC allowed `request` for `reason`. A full memo forgets one entry
    /// first, whichever the map yields first.
    pub fn remember(&self, request: &Request<'_>, reason: Arc<str>) {
        if !request.rememberable() {
            return;
        }
        let hash = request.hash_with(&self.hashes);
        let mut entries = self.entries.lock();
        if entries
            .by_hash
            .get(&hash)
            .is_some_and(|same| same.iter().any(|e| e.is(request)))
        {
            return;
        }
        if entries.count >= CAPACITY {
            entries.forget_one();
        }
        entries.by_hash.entry(hash).or_default().push(Remembered {
            key: request.key(),
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
