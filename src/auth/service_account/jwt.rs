//! Compact JSON Web Signatures with ES256 (ECDSA P-256, SHA-256; RFC 7515, 7518): the one
//! format service-account tokens travel in. A token is
//! `base64url(header) . base64url(claims) . base64url(r || s)`, the header
//! `{"alg":"ES256","kid":"<key id>"}`; anything else (another `alg`, `none` included, a
//! signature of another length, padding, more or fewer than three parts) is refused before a
//! signature is checked.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{
    EcdsaKeyPair, KeyPair, UnparsedPublicKey, ECDSA_P256_SHA256_FIXED,
    ECDSA_P256_SHA256_FIXED_SIGNING,
};
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};

use super::TokenError;

/// The longest token looked at: real ones are about 1 KiB; a bigger one is refused before it
/// is decoded.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// The DER prefix of a P-256 public key's SubjectPublicKeyInfo (id-ecPublicKey, prime256v1,
/// then the 65-byte uncompressed point as a BIT STRING).
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

/// The key tokens are signed and checked with.
pub struct SigningKey {
    pair: EcdsaKeyPair,
    rng: SystemRandom,
    /// base64url of the SHA-256 of the public key's SubjectPublicKeyInfo, as kube-apiserver
    /// names its keys.
    kid: String,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey(kid {})", self.kid)
    }
}

impl SigningKey {
    /// A key from its PKCS#8 DER (how rcgen stores the cluster CA key).
    pub fn from_pkcs8(der: &[u8]) -> Result<SigningKey, TokenError> {
        let rng = SystemRandom::new();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der, &rng)
            .map_err(|e| TokenError::Key(e.to_string()))?;
        let mut spki = P256_SPKI_PREFIX.to_vec();
        spki.extend_from_slice(pair.public_key().as_ref());
        let kid = URL_SAFE_NO_PAD.encode(Sha256::digest(&spki));
        Ok(SigningKey { pair, rng, kid })
    }

    /// A fresh key, for contexts that never see the cluster's (unit tests, tools).
    pub fn generate() -> Result<SigningKey, TokenError> {
        let rng = SystemRandom::new();
        let der = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| TokenError::Key("generating a P-256 key failed".into()))?;
        SigningKey::from_pkcs8(der.as_ref())
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// A signed token carrying `claims`.
    pub fn sign(&self, claims: &serde_json::Value) -> Result<String, TokenError> {
        let header = json!({"alg": "ES256", "kid": self.kid});
        let mut token = URL_SAFE_NO_PAD.encode(header.to_string());
        token.push('.');
        token.push_str(&URL_SAFE_NO_PAD.encode(claims.to_string()));
        let signature = self
            .pair
            .sign(&self.rng, token.as_bytes())
            .map_err(|_| TokenError::Key("signing failed".into()))?;
        token.push('.');
        token.push_str(&URL_SAFE_NO_PAD.encode(signature.as_ref()));
        Ok(token)
    }

    /// The claims of `token` (still JSON) if its signature is this key's.
    pub fn verify(&self, token: &[u8]) -> Result<Vec<u8>, TokenError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(TokenError::Malformed(
                "longer than any token this server issues",
            ));
        }
        let mut parts = token.split(|b| *b == b'.');
        let (Some(header), Some(claims), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::Malformed("not three dot-separated parts"));
        };
        let header: Header = serde_json::from_slice(&decode(header)?)
            .map_err(|_| TokenError::Malformed("the header is not a JWS header"))?;
        if header.alg != "ES256" {
            return Err(TokenError::Algorithm(header.alg));
        }
        if header.kid.as_deref().is_some_and(|kid| kid != self.kid) {
            return Err(TokenError::Signature);
        }
        let signature = decode(signature)?;
        let signed = &token[..token.len() - signature_len(token)];
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, self.pair.public_key().as_ref())
            .verify(signed, &signature)
            .map_err(|_| TokenError::Signature)?;
        decode(claims)
    }

    /// The public key as a JSON Web Key (`/openid/v1/jwks` lists it).
    pub fn jwk(&self) -> serde_json::Value {
        let point = self.pair.public_key().as_ref();
        json!({
            "use": "sig",
            "kty": "EC",
            "kid": self.kid,
            "crv": "P-256",
            "alg": "ES256",
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
        })
    }
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    kid: Option<String>,
}

/// The length of the last part with its dot: what follows the signed `header.claims`.
fn signature_len(token: &[u8]) -> usize {
    token.iter().rev().take_while(|b| **b != b'.').count() + 1
}

fn decode(part: &[u8]) -> Result<Vec<u8>, TokenError> {
    URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| TokenError::Malformed("a part is not unpadded base64url"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(text: &str) -> String {
        URL_SAFE_NO_PAD.encode(text)
    }

    #[test]
    fn signs_and_verifies() {
        let key = SigningKey::generate().unwrap();
        let token = key.sign(&json!({"sub": "me"})).unwrap();
        let claims = key.verify(token.as_bytes()).unwrap();
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&claims).unwrap(),
            json!({"sub": "me"})
        );
        let jwk = key.jwk();
        assert_eq!(jwk["kid"], key.kid());
        assert_eq!(
            URL_SAFE_NO_PAD
                .decode(jwk["x"].as_str().unwrap())
                .unwrap()
                .len(),
            32
        );
    }

    #[test]
    fn refuses_what_it_did_not_sign() {
        let key = SigningKey::generate().unwrap();
        let other = SigningKey::generate().unwrap();
        let token = key.sign(&json!({"sub": "me"})).unwrap();
        let (signed, signature) = token.rsplit_once('.').unwrap();
        let (header, _) = signed.split_once('.').unwrap();
        let forged_claims = format!("{header}.{}.{signature}", b64(r#"{"sub":"admin"}"#));
        let unsigned = format!("{}.{}.", b64(r#"{"alg":"none"}"#), b64(r#"{"sub":"me"}"#));
        let hs256 = format!("{}.{}.AAAA", b64(r#"{"alg":"HS256"}"#), b64("{}"));
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                other.sign(&json!({"sub": "me"})).unwrap().into_bytes(),
                "wrong key",
            ),
            (forged_claims.into_bytes(), "changed claims"),
            (unsigned.into_bytes(), "alg none"),
            (hs256.into_bytes(), "another algorithm"),
            (b"!!!.###.$$$".to_vec(), "garbage"),
            (b"a.b".to_vec(), "two parts"),
            (b"a.b.c.d".to_vec(), "four parts"),
            (b"".to_vec(), "empty"),
            (vec![b'a'; 1 << 20], "one MiB"),
            (format!("{token}=").into_bytes(), "padding"),
            (format!("{signed}.").into_bytes(), "no signature"),
        ];
        for (token, what) in cases {
            assert!(key.verify(&token).is_err(), "{what}");
        }
        // The key id names the key: a token naming another key is refused unchecked.
        let named = other.sign(&json!({})).unwrap();
        assert!(matches!(
            key.verify(named.as_bytes()),
            Err(TokenError::Signature)
        ));
    }

    #[test]
    fn the_key_id_is_stable_for_a_key() {
        let der =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
                .unwrap();
        let a = SigningKey::from_pkcs8(der.as_ref()).unwrap();
        let b = SigningKey::from_pkcs8(der.as_ref()).unwrap();
        assert_eq!(a.kid(), b.kid());
        assert!(b.verify(a.sign(&json!({})).unwrap().as_bytes()).is_ok());
    }
}
