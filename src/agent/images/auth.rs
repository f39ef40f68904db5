//! How a registry asks to be authenticated and what we answer: its `WWW-Authenticate`
//! challenges (`Basic realm=…` or `Bearer realm=…,service=…,scope=…`), the token request of
//! the Bearer scheme (`GET realm?service=…&scope=repository:NAME:pull`, with the pull
//! secret's user and password as Basic credentials when there are any, anonymous otherwise),
//! and the `Authorization` header that results.

use base64::Engine as _;
use http::HeaderValue;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use super::credentials::Credential;

/// One challenge of a `WWW-Authenticate` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Challenge {
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
}

/// Parses the challenges of `WWW-Authenticate` header values; schemes we do not speak, and
/// Bearer challenges without a realm, are left out.
pub fn parse_challenges<'a>(values: impl IntoIterator<Item = &'a str>) -> Vec<Challenge> {
    let mut out = Vec::new();
    for value in values {
        for (scheme, params) in split_challenges(value) {
            let param = |name: &str| {
                params
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.clone())
            };
            if scheme.eq_ignore_ascii_case("basic") {
                out.push(Challenge::Basic);
            } else if scheme.eq_ignore_ascii_case("bearer") {
                if let Some(realm) = param("realm") {
                    out.push(Challenge::Bearer {
                        realm,
                        service: param("service"),
                        scope: param("scope"),
                    });
                }
            }
        }
    }
    out
}

type Params = Vec<(String, String)>;

/// `Scheme k=v, k="v", Scheme2 k=v` → [(Scheme, [(k, v)…]), …].
fn split_challenges(value: &str) -> Vec<(String, Params)> {
    let mut out: Vec<(String, Params)> = Vec::new();
    let bytes = value.as_bytes();
    let mut i = 0;
    let skip = |i: &mut usize, set: &[u8]| {
        while *i < bytes.len() && set.contains(&bytes[*i]) {
            *i += 1;
        }
    };
    let token = |i: &mut usize| {
        let start = *i;
        while *i < bytes.len() && !b" \t,=\"".contains(&bytes[*i]) {
            *i += 1;
        }
        value[start..*i].to_string()
    };
    loop {
        skip(&mut i, b" \t,");
        if i >= bytes.len() {
            break;
        }
        let word = token(&mut i);
        if word.is_empty() {
            // A stray quote or `=`: step over it.
            i += 1;
            continue;
        }
        let after_ws = {
            let mut j = i;
            skip(&mut j, b" \t");
            j
        };
        if after_ws < bytes.len() && bytes[after_ws] == b'=' && !out.is_empty() {
            // A parameter of the current challenge.
            i = after_ws + 1;
            skip(&mut i, b" \t");
            let v = if i < bytes.len() && bytes[i] == b'"' {
                i += 1;
                let mut v = String::new();
                while i < bytes.len() && bytes[i] != b'"' {
                    if bytes[i] == b'\\' && i + 1 < bytes.len() {
                        i += 1;
                    }
                    let ch_len = value[i..].chars().next().map_or(1, char::len_utf8);
                    v.push_str(&value[i..i + ch_len]);
                    i += ch_len;
                }
                i += 1;
                v
            } else {
                token(&mut i)
            };
            if let Some((_, params)) = out.last_mut() {
                params.push((word, v));
            }
        } else {
            out.push((word, Vec::new()));
        }
    }
    out
}

/// Characters escaped in a token request's query values.
const QUERY: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The token request's URL for `challenge` and `repository` (the challenge's scope when it
/// names one, else pull access to the repository).
pub fn token_url(
    realm: &str,
    service: Option<&str>,
    scope: Option<&str>,
    repository: &str,
) -> String {
    let scope = match scope {
        Some(s) => s.to_string(),
        None => format!("repository:{repository}:pull"),
    };
    let mut url = realm.to_string();
    let mut sep = if realm.contains('?') { '&' } else { '?' };
    if let Some(service) = service {
        url.push_str(&format!(
            "{sep}service={}",
            utf8_percent_encode(service, QUERY)
        ));
        sep = '&';
    }
    url.push_str(&format!(
        "{sep}scope={}",
        utf8_percent_encode(&scope, QUERY)
    ));
    url
}

/// `Authorization: Basic …` for `credential`.
pub fn basic(credential: &Credential) -> Option<HeaderValue> {
    let raw = format!("{}:{}", credential.username, credential.password);
    let encoded = base64::engine::general_purpose::STANDARD.encode(raw);
    sensitive(&format!("Basic {encoded}"))
}

/// `Authorization: Bearer …` for a token from a token server.
pub fn bearer(token: &str) -> Option<HeaderValue> {
    sensitive(&format!("Bearer {token}"))
}

fn sensitive(text: &str) -> Option<HeaderValue> {
    let mut value = HeaderValue::from_str(text).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// The token in a token server's answer (`token`, or OAuth2's `access_token`).
pub fn token_from_answer(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Answer {
        #[serde(default)]
        token: Option<String>,
        #[serde(default)]
        access_token: Option<String>,
    }
    let answer: Answer = serde_json::from_slice(body).ok()?;
    answer
        .token
        .filter(|t| !t.is_empty())
        .or(answer.access_token.filter(|t| !t.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_are_parsed_with_quoted_and_bare_parameters() {
        let hub = r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/busybox:pull""#;
        assert_eq!(
            parse_challenges([hub]),
            vec![Challenge::Bearer {
                realm: "https://auth.docker.io/token".into(),
                service: Some("registry.docker.io".into()),
                scope: Some("repository:library/busybox:pull".into()),
            }]
        );
        assert_eq!(
            parse_challenges([r#"Basic realm="test""#]),
            vec![Challenge::Basic]
        );
        assert_eq!(
            parse_challenges([r#"Basic realm="a, b", Bearer realm=http://t/x, service = "s\"q""#]),
            vec![
                Challenge::Basic,
                Challenge::Bearer {
                    realm: "http://t/x".into(),
                    service: Some("s\"q".into()),
                    scope: None
                }
            ]
        );
        assert_eq!(
            parse_challenges(["Negotiate", "Bearer service=x", "", "=\""]),
            vec![]
        );
    }

    #[test]
    fn token_requests_carry_service_and_scope_escaped() {
        assert_eq!(
            token_url(
                "https://a/token",
                Some("reg istry"),
                None,
                "library/busybox"
            ),
            "https://a/token?service=reg%20istry&scope=repository%3Alibrary%2Fbusybox%3Apull"
        );
        assert_eq!(
            token_url("https://a/token?x=1", None, Some("repository:x:pull"), "y"),
            "https://a/token?x=1&scope=repository%3Ax%3Apull"
        );
        assert_eq!(
            token_from_answer(br#"{"token":"t1"}"#).as_deref(),
            Some("t1")
        );
        assert_eq!(
            token_from_answer(br#"{"token":"","access_token":"t2"}"#).as_deref(),
            Some("t2")
        );
        assert_eq!(token_from_answer(b"{}"), None);
        let b = basic(&Credential {
            username: "alice".into(),
            password: "secret".into(),
        })
        .unwrap();
        assert_eq!(b.to_str().unwrap(), "Basic YWxpY2U6c2VjcmV0");
        assert!(b.is_sensitive());
    }
}
