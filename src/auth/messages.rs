//! The texts kube-apiserver's authorization writes, to the byte: the reason of a 403
//! (`responsewriters.forbiddenMessage`), Go's `%q` quoting that every one of them uses, and the
//! sanitizing of `&`, `<` and `>` that keeps a message from reading as HTML.

use super::attributes::RequestInfo;

/// Go's `%q` of a string: double quotes, with `"`, `\` and control characters escaped.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `%q` of a `[]string`: `["a" "b"]`.
pub fn go_quote_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| go_quote(s)).collect();
    format!("[{}]", quoted.join(" "))
}

/// What a denied request could not do: `User "u" cannot list resource "pods" in API group ""
/// in the namespace "ns"` (or `at the cluster scope`, or `cannot get path "/api"`), with
/// kube-apiserver's HTML sanitizing applied.
pub fn forbidden(user: &str, info: &RequestInfo) -> String {
    let text = if !info.resource_request {
        format!(
            "User {} cannot {} path {}",
            go_quote(user),
            info.verb,
            go_quote(&info.path)
        )
    } else if !info.namespace.is_empty() {
        format!(
            "User {} cannot {} resource {} in API group {} in the namespace {}",
            go_quote(user),
            info.verb,
            go_quote(&info.combined_resource()),
            go_quote(&info.api_group),
            go_quote(&info.namespace)
        )
    } else {
        format!(
            "User {} cannot {} resource {} in API group {} at the cluster scope",
            go_quote(user),
            info.verb,
            go_quote(&info.combined_resource()),
            go_quote(&info.api_group)
        )
    };
    sanitize(&text)
}

/// Replaces `&`, `<` and `>` with their HTML entities.
pub fn sanitize(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    #[test]
    fn quoting_as_go_does() {
        assert_eq!(go_quote("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(go_quote("tab\there\u{1}"), r#""tab\there\x01""#);
        assert_eq!(go_quote("ünï"), "\"ünï\"");
        assert_eq!(go_quote_list(&["a".into(), "b c".into()]), r#"["a" "b c"]"#);
        assert_eq!(go_quote_list(&[]), "[]");
    }

    #[test]
    fn forbidden_texts() {
        let list = RequestInfo::from_request(&Method::GET, "/api/v1/namespaces/y/pods", None);
        assert_eq!(
            forbidden("x", &list),
            r#"User "x" cannot list resource "pods" in API group "" in the namespace "y""#
        );
        let nodes = RequestInfo::from_request(&Method::GET, "/api/v1/nodes/n/status", None);
        assert_eq!(
            forbidden("x", &nodes),
            r#"User "x" cannot get resource "nodes/status" in API group "" at the cluster scope"#
        );
        let path = RequestInfo::from_request(&Method::GET, "/apis/<b>", None);
        assert_eq!(
            forbidden("system:anonymous", &path),
            r#"User "system:anonymous" cannot get path "/apis/&lt;b&gt;""#
        );
    }
}
