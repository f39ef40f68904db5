//! Static bearer tokens from a file (`--token-auth-file`), in kube-apiserver's CSV format: one
//! record per line, `token,user,uid` and optionally a quoted comma-separated group list
//! (`token,alice,1000,"dev,ops"`). Read once at start; a token is looked up by its SHA-256,
//! so the comparison's timing says nothing about the stored tokens.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::user::UserInfo;

/// Why the file cannot be used (the server refuses to start).
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("reading the token file {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(
        "token file '{path}' must have at least 3 columns (token, user name, user uid), found {found} (record {record})"
    )]
    TooFewColumns {
        path: PathBuf,
        record: usize,
        found: usize,
    },
    #[error("token file '{path}', record {record}: {reason}")]
    Malformed {
        path: PathBuf,
        record: usize,
        reason: &'static str,
    },
}

/// The users of a token file, by the SHA-256 of their token.
#[derive(Clone, Default)]
pub struct TokenFile {
    users: HashMap<[u8; 32], UserInfo>,
}

impl std::fmt::Debug for TokenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TokenFile({} tokens)", self.users.len())
    }
}

impl TokenFile {
    pub fn load(path: &Path) -> Result<TokenFile, TokenFileError> {
        let text = std::fs::read_to_string(path).map_err(|error| TokenFileError::Read {
            path: path.to_path_buf(),
            error,
        })?;
        TokenFile::parse(path, &text)
    }

    fn parse(path: &Path, text: &str) -> Result<TokenFile, TokenFileError> {
        let mut users = HashMap::new();
        for (record, line) in text
            .lines()
            .map(|l| l.trim_end_matches('\r'))
            .filter(|l| !l.is_empty())
            .enumerate()
        {
            let record = record + 1;
            let fields = csv_fields(line).map_err(|reason| TokenFileError::Malformed {
                path: path.to_path_buf(),
                record,
                reason,
            })?;
            if fields.len() < 3 {
                return Err(TokenFileError::TooFewColumns {
                    path: path.to_path_buf(),
                    record,
                    found: fields.len(),
                });
            }
            if fields[0].is_empty() {
                tracing::warn!(path = %path.display(), record, "empty token in the token file: skipped");
                continue;
            }
            let groups = fields
                .get(3)
                .map(|g| g.split(',').map(str::to_string).collect())
                .unwrap_or_default();
            let user = UserInfo {
                name: fields[1].clone(),
                uid: fields[2].clone(),
                groups,
                ..UserInfo::default()
            };
            if users.insert(digest(fields[0].as_bytes()), user).is_some() {
                tracing::warn!(path = %path.display(), record, "duplicate token in the token file: the last one counts");
            }
        }
        Ok(TokenFile { users })
    }

    /// The user of `token`, if the file has it.
    pub fn user(&self, token: &[u8]) -> Option<&UserInfo> {
        // Without a file (the usual case) every other bearer token would pay a hash here.
        if self.users.is_empty() {
            return None;
        }
        self.users.get(&digest(token))
    }

    /// How many tokens the file holds.
    pub fn count(&self) -> usize {
        self.users.len()
    }
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

/// The fields of one CSV record (RFC 4180 quoting: `"a,b"`, `""` for a quote).
fn csv_fields(line: &str) -> Result<Vec<String>, &'static str> {
    let mut fields = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        let mut field = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    Some('"') => break,
                    Some(c) => field.push(c),
                    None => return Err("a quoted field is not closed"),
                }
            }
            match chars.next() {
                None => {
                    fields.push(field);
                    return Ok(fields);
                }
                Some(',') => {}
                Some(_) => return Err("text after a quoted field"),
            }
        } else {
            loop {
                match chars.next() {
                    None => {
                        fields.push(field);
                        return Ok(fields);
                    }
                    Some(',') => break,
                    Some('"') => return Err("a quote inside an unquoted field"),
                    Some(c) => field.push(c),
                }
            }
        }
        fields.push(field);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_kube_apiservers_format() {
        let file = TokenFile::parse(
            Path::new("t.csv"),
            "tok1,alice,1000,\"dev,ops\"\n\ntok2,bob,1001\r\n,nobody,1\n\"tok,3\",carol,\"\"\n",
        )
        .unwrap();
        assert_eq!(file.count(), 3);
        let alice = file.user(b"tok1").unwrap();
        assert_eq!((alice.name.as_str(), alice.uid.as_str()), ("alice", "1000"));
        assert_eq!(alice.groups, ["dev", "ops"]);
        assert!(file.user(b"tok2").unwrap().groups.is_empty());
        assert_eq!(file.user(b"tok,3").unwrap().name, "carol");
        assert!(file.user(b"").is_none());
        assert!(file.user(b"tok").is_none());
    }

    #[test]
    fn refuses_what_kube_apiserver_refuses() {
        for bad in ["tok,alice\n", "tok\n", "\"tok,alice,1\n", "t\"ok,alice,1\n"] {
            assert!(
                TokenFile::parse(Path::new("t.csv"), bad).is_err(),
                "{bad:?}"
            );
        }
        let err = TokenFile::parse(Path::new("t.csv"), "a,b\n").unwrap_err();
        assert!(err.to_string().contains("at least 3 columns"), "{err}");
    }
}
