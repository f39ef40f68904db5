//! Tokens whose signature and claims were verified, by the SHA-256 of the token: a request
//! with a known token skips the signature check (the costly part of authenticating it). Only
//! what the token itself says is cached; whether the objects it names still exist is asked
//! of the store on every request. Bounded: expired entries are dropped when the cache is
//! full, and everything if that frees nothing.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;
use sha2::{Digest, Sha256};

use super::claims::Claims;

/// Entries kept at most.
const CAPACITY: usize = 8192;

#[derive(Default)]
pub struct VerifiedCache {
    entries: RwLock<HashMap<[u8; 32], Arc<Claims>>>,
}

impl VerifiedCache {
    /// The verified claims of `token`, if it is known and not expired at `now`.
    pub fn get(&self, token: &[u8], now: i64) -> Option<Arc<Claims>> {
        let claims = self.entries.read().get(&digest(token)).cloned()?;
        (!expired(&claims, now)).then_some(claims)
    }

    pub fn insert(&self, token: &[u8], claims: Arc<Claims>, now: i64) {
        if expired(&claims, now) {
            return;
        }
        let mut entries = self.entries.write();
        if entries.len() >= CAPACITY {
            entries.retain(|_, c| !expired(c, now));
            if entries.len() >= CAPACITY {
                entries.clear();
            }
        }
        entries.insert(digest(token), claims);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.read().len()
    }
}

/// Past `exp` (legacy tokens have none and stay until evicted).
fn expired(claims: &Claims, now: i64) -> bool {
    claims.exp.is_some_and(|exp| exp < now)
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}
