//! Tokens whose signature was verified, by the SHA-256 of the token, with what their claims say
//! read once ([`Verified`]: the user, the store keys to check): a request with a known token
//! skips the signature check and the reading of its claims. Only what the token itself says is
//! cached; whether the objects it names still exist is asked of the store on every request.
//! Bounded: expired entries are dropped when the cache is full, and everything if that frees
//! nothing. A connection also keeps the last token it presented ([`LastToken`]), so a
//! keep-alive client's requests skip the hash as well.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use sha2::{Digest, Sha256};

use super::verified::Verified;

/// Entries kept at most.
const CAPACITY: usize = 8192;

#[derive(Default)]
pub struct VerifiedCache {
    entries: RwLock<HashMap<[u8; 32], Arc<Verified>>>,
}

impl VerifiedCache {
    /// The verified `token`, if it is known and not expired at `now`.
    pub fn get(&self, token: &[u8], now: i64) -> Option<Arc<Verified>> {
        let verified = self.entries.read().get(&digest(token)).cloned()?;
        (!expired(&verified, now)).then_some(verified)
    }

    pub fn insert(&self, token: &[u8], verified: Arc<Verified>, now: i64) {
        if expired(&verified, now) {
            return;
        }
        let mut entries = self.entries.write();
        if entries.len() >= CAPACITY {
            entries.retain(|_, c| !expired(c, now));
            if entries.len() >= CAPACITY {
                entries.clear();
            }
        }
        entries.insert(digest(token), verified);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.read().len()
    }
}

/// Past `exp` (legacy tokens have none and stay until evicted).
fn expired(verified: &Verified, now: i64) -> bool {
    verified.exp.is_some_and(|exp| exp < now)
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

/// The last token one connection presented that verified, kept with the connection: a
/// keep-alive client sends the same token on every request, and comparing the bytes with the
/// last ones costs less than hashing them for the shared cache. Holds only what the token
/// itself says, like the shared cache; a clone starts empty (it belongs to one connection).
#[derive(Default)]
pub struct LastToken(Mutex<Option<Presented>>);

/// A token as a connection presented it, and what it says.
struct Presented {
    token: Box<[u8]>,
    verified: Arc<Verified>,
}

impl LastToken {
    /// The verified `token` if it is the one this connection presented last and it is not
    /// expired at `now`.
    pub fn get(&self, token: &[u8], now: i64) -> Option<Arc<Verified>> {
        let last = self.0.lock();
        let presented = last.as_ref()?;
        (*presented.token == *token && !expired(&presented.verified, now))
            .then(|| presented.verified.clone())
    }

    pub fn set(&self, token: &[u8], verified: Arc<Verified>) {
        *self.0.lock() = Some(Presented {
            token: token.into(),
            verified,
        });
    }
}

impl Clone for LastToken {
    fn clone(&self) -> Self {
        LastToken::default()
    }
}

impl std::fmt::Debug for LastToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LastToken")
    }
}
