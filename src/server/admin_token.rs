//! The admin bearer token: 32 random bytes, hex-encoded, generated on first start into
//! `<data-dir>/admin-token` (0600) and compared in constant time.

use std::path::Path;

use rand::RngCore;

use super::datadir::{read_optional, write_file, SECRET_MODE};
use super::error::ServerError;

const TOKEN_BYTES: usize = 32;

/// A bearer token that grants cluster-admin.
#[derive(Clone)]
pub struct AdminToken(String);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(<redacted>)")
    }
}

impl AdminToken {
    /// Reads the token at `path`, or generates and stores a new one if the file is missing.
    pub fn load_or_create(path: &Path) -> Result<AdminToken, ServerError> {
        if let Some(text) = read_optional(path)? {
            let token = text.trim();
            let usable = token.len() >= 32
                && token
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !usable {
                return Err(ServerError::corrupt(
                    path,
                    "expected one token of at least 32 characters [A-Za-z0-9_-]",
                ));
            }
            return Ok(AdminToken(token.to_string()));
        }
        let mut bytes = [0u8; TOKEN_BYTES];
        rand::thread_rng().fill_bytes(&mut bytes);
        let token = hex::encode(bytes);
        write_file(path, format!("{token}\n").as_bytes(), SECRET_MODE)?;
        tracing::info!(path = %path.display(), "generated the admin token");
        Ok(AdminToken(token))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `candidate` is this token, in time that depends only on the lengths.
    pub fn matches(&self, candidate: &[u8]) -> bool {
        let expected = self.0.as_bytes();
        if candidate.len() != expected.len() {
            return false;
        }
        let diff = expected
            .iter()
            .zip(candidate)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(diff) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_then_reloads_and_rejects_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin-token");
        let token = AdminToken::load_or_create(&path).unwrap();
        assert_eq!(token.as_str().len(), 64);
        let again = AdminToken::load_or_create(&path).unwrap();
        assert_eq!(token.as_str(), again.as_str());
        assert!(token.matches(again.as_str().as_bytes()));
        assert!(!token.matches(b"nope"));
        let mut wrong = token.as_str().as_bytes().to_vec();
        wrong[63] ^= 1;
        assert!(!token.matches(&wrong));

        std::fs::write(&path, "short\n").unwrap();
        let err = AdminToken::load_or_create(&path).unwrap_err().to_string();
        assert!(err.contains("admin-token"), "{err}");
    }
}
