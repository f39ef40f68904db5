//! The join token `K10<sha256 of the cluster CA certificate, hex>::server:<secret>` (the k3s
//! form): the hash lets a joining server check the CA it is handed before trusting it; the
//! secret authenticates servers to each other (Raft RPCs, joins, forwarded requests).

use sha2::{Digest, Sha256};

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the token is empty")]
    Empty,
    #[error("the token's secret must be 16 to 256 characters of [A-Za-z0-9._-]")]
    BadSecret,
    #[error("the token does not have the form K10<sha256 hex>::server:<secret>")]
    Malformed,
}

/// The cluster secret: what every server and joiner proves it holds.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSecret(String);

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(<redacted>)")
    }
}

impl ClusterSecret {
    pub fn new(secret: &str) -> Result<ClusterSecret, TokenError> {
        let ok = (16..=256).contains(&secret.len())
            && secret
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if ok {
            Ok(ClusterSecret(secret.to_string()))
        } else {
            Err(TokenError::BadSecret)
        }
    }

    /// A fresh random secret (32 bytes, hex).
    pub fn generate() -> ClusterSecret {
        use rand::RngCore;
        let mut bytes = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut bytes);
        ClusterSecret(hex::encode(bytes))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `candidate` is this secret, in time that depends only on the lengths.
    pub fn matches(&self, candidate: &[u8]) -> bool {
        let expected = self.0.as_bytes();
        expected.len() == candidate.len()
            && expected
                .iter()
                .zip(candidate)
                .fold(0u8, |diff, (a, b)| diff | (a ^ b))
                == 0
    }
}

/// A parsed join token. The CA hash is absent when only a bare secret was given (accepted by
/// `--cluster-init`, which owns the CA; a joiner needs the hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinToken {
    pub ca_hash: Option<String>,
    pub secret: ClusterSecret,
}

impl JoinToken {
    /// Parses `K10<hash>::server:<secret>` or a bare secret.
    pub fn parse(text: &str) -> Result<JoinToken, TokenError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(TokenError::Empty);
        }
        let Some(rest) = text.strip_prefix("K10") else {
            return Ok(JoinToken {
                ca_hash: None,
                secret: ClusterSecret::new(text)?,
            });
        };
        let (hash, secret) = rest.split_once("::").ok_or(TokenError::Malformed)?;
        let secret = secret
            .split_once(':')
            .map(|(_user, secret)| secret)
            .ok_or(TokenError::Malformed)?;
        let hex_ok = hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit());
        if !hex_ok {
            return Err(TokenError::Malformed);
        }
        Ok(JoinToken {
            ca_hash: Some(hash.to_ascii_lowercase()),
            secret: ClusterSecret::new(secret)?,
        })
    }

    /// The full token for a cluster whose CA certificate is `ca_pem`.
    pub fn for_cluster(ca_pem: &str, secret: &ClusterSecret) -> String {
        format!("K10{}::server:{}", ca_hash(ca_pem), secret.as_str())
    }
}

/// sha256 of the CA certificate file's bytes, lowercase hex (what k3s hashes too).
pub fn ca_hash(ca_pem: &str) -> String {
    hex::encode(Sha256::digest(ca_pem.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_token_round_trips() {
        let secret = ClusterSecret::new("0123456789abcdef0123").unwrap();
        let token = JoinToken::for_cluster("CA PEM", &secret);
        let parsed = JoinToken::parse(&format!("  {token}\n")).unwrap();
        assert_eq!(parsed.ca_hash.as_deref(), Some(ca_hash("CA PEM").as_str()));
        assert_eq!(parsed.secret, secret);
    }

    #[test]
    fn bare_secret_has_no_hash() {
        let parsed = JoinToken::parse("just-a-long-enough-secret").unwrap();
        assert_eq!(parsed.ca_hash, None);
    }

    #[test]
    fn bad_tokens_are_refused() {
        assert_eq!(JoinToken::parse(""), Err(TokenError::Empty));
        assert_eq!(JoinToken::parse("short"), Err(TokenError::BadSecret));
        assert_eq!(
            JoinToken::parse("K10abc::server:0123456789abcdef"),
            Err(TokenError::Malformed)
        );
        let hash = "a".repeat(64);
        assert_eq!(
            JoinToken::parse(&format!("K10{hash}server:x")),
            Err(TokenError::Malformed)
        );
        assert_eq!(
            JoinToken::parse(&format!("K10{hash}::server:bad secret with spaces")),
            Err(TokenError::BadSecret)
        );
    }

    #[test]
    fn secret_comparison() {
        let secret = ClusterSecret::new("0123456789abcdef0123").unwrap();
        assert!(secret.matches(b"0123456789abcdef0123"));
        assert!(!secret.matches(b"0123456789abcdef0124"));
        assert!(!secret.matches(b"0123"));
    }
}
