//! Content digests (`sha256:<64 hex>`), the names of everything in the content store, and the
//! hashing that checks them while bytes stream by. Only sha256 is accepted: it is what every
//! registry and image tool writes, and a digest we cannot check is worth nothing.

use std::fmt;
use std::io::{self, Read};

use sha2::{Digest as _, Sha256};

/// A sha256 content digest.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Digest {
    /// 64 lowercase hex digits.
    hex: String,
}

/// A string that is not a `sha256:<64 lowercase hex>` digest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadDigest {
    #[error("digest {0:?}: only sha256 digests are supported")]
    Algorithm(String),
    #[error("digest {0:?}: expected sha256: and 64 lowercase hex digits")]
    Hex(String),
}

impl Digest {
    /// Parses `sha256:<64 lowercase hex>`.
    pub fn parse(text: &str) -> Result<Digest, BadDigest> {
        let Some((algorithm, hex)) = text.split_once(':') else {
            return Err(BadDigest::Hex(text.to_string()));
        };
        if algorithm != "sha256" {
            return Err(BadDigest::Algorithm(text.to_string()));
        }
        if !is_hex64(hex) {
            return Err(BadDigest::Hex(text.to_string()));
        }
        Ok(Digest {
            hex: hex.to_string(),
        })
    }

    /// From the 64 hex digits alone (a blob's file name).
    pub fn from_hex(hex: &str) -> Option<Digest> {
        is_hex64(hex).then(|| Digest {
            hex: hex.to_string(),
        })
    }

    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        let mut hasher = Hasher::new();
        hasher.update(bytes);
        hasher.finish()
    }

    /// The 64 hex digits, without the algorithm.
    pub fn hex(&self) -> &str {
        &self.hex
    }
}

fn is_hex64(hex: &str) -> bool {
    hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex)
    }
}

impl TryFrom<String> for Digest {
    type Error = BadDigest;
    fn try_from(text: String) -> Result<Digest, BadDigest> {
        Digest::parse(&text)
    }
}

impl From<Digest> for String {
    fn from(d: Digest) -> String {
        d.to_string()
    }
}

/// A running sha256.
#[derive(Clone, Default)]
pub struct Hasher(Sha256);

impl Hasher {
    pub fn new() -> Hasher {
        Hasher(Sha256::new())
    }

    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    pub fn finish(self) -> Digest {
        Digest {
            hex: hex::encode(self.0.finalize()),
        }
    }
}

/// A reader that hashes and counts what passes through it.
pub struct HashingReader<R> {
    inner: R,
    hasher: Hasher,
    count: u64,
}

impl<R: Read> HashingReader<R> {
    pub fn new(inner: R) -> HashingReader<R> {
        HashingReader {
            inner,
            hasher: Hasher::new(),
            count: 0,
        }
    }

    /// Reads what is left (a tar reader stops at its end-of-archive blocks, which need not be
    /// the end of the stream), then gives back the inner reader and the digest and size of
    /// everything read.
    pub fn into_parts(mut self) -> io::Result<(R, Digest, u64)> {
        io::copy(&mut self, &mut io::sink())?;
        Ok((self.inner, self.hasher.finish(), self.count))
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_parse_print_and_hash() {
        let empty = Digest::of(b"");
        assert_eq!(
            empty.to_string(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(Digest::parse(&empty.to_string()), Ok(empty.clone()));
        assert_eq!(Digest::from_hex(empty.hex()), Some(empty.clone()));
        let json = serde_json::to_string(&empty).unwrap();
        assert_eq!(serde_json::from_str::<Digest>(&json).unwrap(), empty);
        for bad in [
            "",
            "sha256",
            "sha256:",
            "sha256:E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855",
            "sha256:e3b0",
            "sha256:../../etc/passwd",
        ] {
            assert_eq!(Digest::parse(bad), Err(BadDigest::Hex(bad.into())), "{bad}");
        }
        assert!(matches!(
            Digest::parse("sha512:00"),
            Err(BadDigest::Algorithm(_))
        ));
        assert!(serde_json::from_str::<Digest>("\"md5:1\"").is_err());
    }

    #[test]
    fn hashing_reader_counts_to_the_end_of_the_stream() {
        let data = b"hello world".to_vec();
        let mut reader = HashingReader::new(&data[..]);
        let mut first = [0u8; 5];
        reader.read_exact(&mut first).unwrap();
        let (_, digest, count) = reader.into_parts().unwrap();
        assert_eq!((digest, count), (Digest::of(&data), 11));
    }
}
