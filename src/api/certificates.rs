//! CertificateSigningRequests (certificates.k8s.io/v1) as kube-apiserver checks them: the
//! PKCS#10 request read from `spec.request` (PEM, signature verified), and the kind's
//! validation with kube-apiserver's field paths and messages: request, usages from the known
//! set without duplicates, a qualified `signerName`, `expirationSeconds` of at least ten
//! minutes, conditions (Approved and Denied exclusive, each type once, never removed) and
//! `status.certificate` (CERTIFICATE PEM blocks, never replaced once set). What each
//! subresource may change, and who may approve or sign, is the admission step's
//! (`write::admission::certificate_signing`); the built-in signers are `controllers::csr_signer`.

use base64::Engine;
use serde_json::Value;
use x509_parser::prelude::FromDer;

use super::status::Cause;

pub const GROUP: &str = "certificates.k8s.io";
/// Client certificates for the API server, for any user the request names.
pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
/// Client certificates for nodes (`system:node:<name>` in `system:nodes`).
pub const KUBE_APISERVER_CLIENT_KUBELET: &str = "kubernetes.io/kube-apiserver-client-kubelet";
const LEGACY_UNKNOWN: &str = "kubernetes.io/legacy-unknown";
/// The shortest lifetime a request may ask for.
pub const MIN_EXPIRATION_SECONDS: i64 = 600;

/// The key usages a request may name (kube-apiserver's list, sorted as its messages show it).
pub const KNOWN_USAGES: [&str; 23] = [
    "any",
    "cert sign",
    "client auth",
    "code signing",
    "content commitment",
    "crl sign",
    "data encipherment",
    "decipher only",
    "digital signature",
    "email protection",
    "encipher only",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "key agreement",
    "key encipherment",
    "microsoft sgc",
    "netscape sgc",
    "ocsp signing",
    "s/mime",
    "server auth",
    "signing",
    "timestamping",
];

/// What the server reads from a request: the subject and the public key it proves it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedRequest {
    pub common_name: String,
    pub organizations: Vec<String>,
    /// The SubjectPublicKeyInfo, DER.
    pub public_key_der: Vec<u8>,
    pub dns_names: usize,
    pub ip_addresses: usize,
    pub email_addresses: usize,
    pub uris: usize,
}

/// The bytes of `spec.request` (base64 in JSON); `None` when it is not base64.
pub fn request_bytes(object: &Value) -> Option<Vec<u8>> {
    match object.pointer("/spec/request") {
        None | Some(Value::Null) => Some(Vec::new()),
        Some(Value::String(s)) => base64::engine::general_purpose::STANDARD.decode(s).ok(),
        Some(_) => None,
    }
}

/// Parses a PEM `CERTIFICATE REQUEST` and verifies its signature, with the error texts
/// kube-apiserver gives.
pub fn parse_request(pem: &[u8]) -> Result<ParsedRequest, String> {
    const NOT_A_CSR: &str = "PEM block type must be CERTIFICATE REQUEST";
    let block = x509_parser::pem::Pem::iter_from_buffer(pem)
        .next()
        .and_then(Result::ok)
        .filter(|p| p.label == "CERTIFICATE REQUEST")
        .ok_or_else(|| NOT_A_CSR.to_string())?;
    let (_, csr) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&block.contents)
            .map_err(|e| format!("asn1: structure error: {e}"))?;
    let info = &csr.certification_request_info;
    if csr.verify_signature().is_err() {
        let ecdsa = info.subject_pki.algorithm.algorithm
            == x509_parser::oid_registry::OID_KEY_TYPE_EC_PUBLIC_KEY;
        return Err(if ecdsa {
            "x509: ECDSA verification failure".into()
        } else {
            "crypto/rsa: verification error".into()
        });
    }
    let text = |a: &x509_parser::x509::AttributeTypeAndValue<'_>| {
        a.as_str().map(str::to_string).unwrap_or_default()
    };
    let mut parsed = ParsedRequest {
        common_name: info
            .subject
            .iter_common_name()
            .next()
            .map(text)
            .unwrap_or_default(),
        organizations: info.subject.iter_organization().map(text).collect(),
        public_key_der: info.subject_pki.raw.to_vec(),
        dns_names: 0,
        ip_addresses: 0,
        email_addresses: 0,
        uris: 0,
    };
    for extension in csr.requested_extensions().into_iter().flatten() {
        if let x509_parser::extensions::ParsedExtension::SubjectAlternativeName(san) = extension {
            for name in &san.general_names {
                use x509_parser::extensions::GeneralName;
                match name {
                    GeneralName::DNSName(_) => parsed.dns_names += 1,
                    GeneralName::IPAddress(_) => parsed.ip_addresses += 1,
                    GeneralName::RFC822Name(_) => parsed.email_addresses += 1,
                    GeneralName::URI(_) => parsed.uris += 1,
                    _ => {}
                }
            }
        }
    }
    Ok(parsed)
}

/// The conditions of `object` of type `kind`.
pub fn conditions_of<'a>(object: &'a Value, kind: &str) -> Vec<&'a Value> {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter(|c| c.get("type").and_then(Value::as_str) == Some(kind))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the request has a condition of type `kind`.
pub fn has_condition(object: &Value, kind: &str) -> bool {
    !conditions_of(object, kind).is_empty()
}

/// The causes of `object`'s refusal (none when valid); `old` is the stored version on update.
pub fn causes(old: Option<&Value>, object: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    match request_bytes(object) {
        Some(bytes) => {
            if let Err(e) = parse_request(&bytes) {
                causes.push(raw_invalid("spec.request", &go_bytes(&bytes), &e));
            }
        }
        None => causes.push(raw_invalid(
            "spec.request",
            "\"<request data>\"",
            "must be base64-encoded PEM",
        )),
    }
    let usages: Vec<&str> = object
        .pointer("/spec/usages")
        .and_then(Value::as_array)
        .map(|u| u.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    // An update keeps what the stored request already had (kube-apiserver tolerates data
    // written by older versions).
    let old_usages: Vec<&str> = old
        .and_then(|o| o.pointer("/spec/usages"))
        .and_then(Value::as_array)
        .map(|u| u.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let tolerate_unknown = old_usages.iter().any(|u| !KNOWN_USAGES.contains(u));
    if usages.is_empty() {
        causes.push(Cause::required("spec.usages", ""));
    }
    let mut seen = Vec::new();
    for (i, usage) in usages.iter().enumerate() {
        let field = format!("spec.usages[{i}]");
        if !tolerate_unknown && !KNOWN_USAGES.contains(usage) {
            causes.push(not_supported(&field, usage, &KNOWN_USAGES));
        }
        if seen.contains(usage) && old.is_none() {
            causes.push(duplicate(&field, usage));
        }
        seen.push(usage);
    }
    let signer = object
        .pointer("/spec/signerName")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let old_signer = old.and_then(|o| o.pointer("/spec/signerName"));
    if signer == LEGACY_UNKNOWN && old_signer.and_then(Value::as_str) != Some(LEGACY_UNKNOWN) {
        causes.push(Cause::invalid(
            "spec.signerName",
            &Value::String(signer.into()),
            "the legacy signerName is not allowed via this API version",
        ));
    } else if signer != LEGACY_UNKNOWN {
        signer_name(signer, &mut causes);
    }
    if let Some(seconds) = object
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
    {
        if seconds < MIN_EXPIRATION_SECONDS {
            causes.push(raw_invalid(
                "spec.expirationSeconds",
                &seconds.to_string(),
                "may not specify a duration less than 600 seconds (10 minutes)",
            ));
        }
    }
    conditions(object, &mut causes);
    certificate(old, object, &mut causes);
    if let Some(old) = old {
        for kind in ["Approved", "Denied", "Failed"] {
            if conditions_of(object, kind).len() < conditions_of(old, kind).len() {
                causes.push(Cause::forbidden(
                    "status.conditions",
                    &format!("updates may not remove a condition of type {kind:?}"),
                ));
            }
        }
    }
    causes
}

/// kube-apiserver's `ValidateSignerName`: `<domain>/<path>`, the domain a DNS subdomain of at
/// least two labels, the path dot-separated DNS subdomains.
fn signer_name(signer: &str, causes: &mut Vec<Cause>) {
    const FIELD: &str = "spec.signerName";
    if signer.is_empty() {
        causes.push(Cause::required(FIELD, ""));
        return;
    }
    let Some((domain, path)) = signer.split_once('/').filter(|(_, p)| !p.contains('/')) else {
        causes.push(Cause::invalid(
            FIELD,
            &Value::String(signer.into()),
            "must be a fully qualified domain and path of the form 'example.com/signer-name'",
        ));
        return;
    };
    if domain.len() > 253 {
        causes.push(too_long(FIELD, 253));
    }
    if !super::validation::is_dns1123_subdomain(domain) {
        causes.push(Cause::invalid(
            FIELD,
            &Value::String(domain.into()),
            SUBDOMAIN_MSG,
        ));
    }
    if domain.split('.').count() < 2 {
        causes.push(Cause::invalid(
            FIELD,
            &Value::String(domain.into()),
            "should be a domain with at least two segments separated by dots",
        ));
    }
    if let Some(label) = path
        .split('.')
        .find(|l| !super::validation::is_dns1123_subdomain(l))
    {
        causes.push(Cause::invalid(
            FIELD,
            &Value::String(path.into()),
            &format!("validating label {label:?}: {SUBDOMAIN_MSG}"),
        ));
    }
    if signer.len() > 253 + 253 + 63 + 2 {
        causes.push(too_long(FIELD, 253 + 253 + 63 + 2));
    }
}

const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

fn conditions(object: &Value, causes: &mut Vec<Cause>) {
    let Some(list) = object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
    else {
        return;
    };
    let mut seen: Vec<&str> = Vec::new();
    let (mut approved, mut denied) = (false, false);
    for (i, condition) in list.iter().enumerate() {
        let kind = condition
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let status = condition
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if kind.is_empty() {
            causes.push(Cause::required(&format!("status.conditions[{i}].type"), ""));
        }
        let allowed: &[&str] = if matches!(kind, "Approved" | "Denied" | "Failed") {
            &["True"]
        } else {
            &["False", "True", "Unknown"]
        };
        let status_field = format!("status.conditions[{i}].status");
        if status.is_empty() {
            causes.push(Cause::required(&status_field, ""));
        } else if !allowed.contains(&status) {
            causes.push(not_supported(&status_field, status, allowed));
        }
        let type_field = format!("status.conditions[{i}].type");
        let exclusive = "Approved and Denied conditions are mutually exclusive";
        match kind {
            "Approved" => {
                approved = true;
                if denied {
                    causes.push(Cause::invalid(
                        &type_field,
                        &Value::String(kind.into()),
                        exclusive,
                    ));
                }
            }
            "Denied" => {
                denied = true;
                if approved {
                    causes.push(Cause::invalid(
                        &type_field,
                        &Value::String(kind.into()),
                        exclusive,
                    ));
                }
            }
            _ => {}
        }
        if seen.contains(&kind) {
            causes.push(duplicate(&type_field, kind));
        }
        seen.push(kind);
    }
}

/// `status.certificate`: when it changes, CERTIFICATE PEM blocks only, and never over one
/// already issued.
fn certificate(old: Option<&Value>, object: &Value, causes: &mut Vec<Cause>) {
    let new = object
        .pointer("/status/certificate")
        .and_then(Value::as_str);
    let before = old
        .and_then(|o| o.pointer("/status/certificate"))
        .and_then(Value::as_str);
    if new == before {
        return;
    }
    if before.is_some_and(|b| !b.is_empty()) {
        causes.push(Cause::forbidden(
            "status.certificate",
            "updates may not modify existing certificate content",
        ));
        return;
    }
    let Some(new) = new.filter(|n| !n.is_empty()) else {
        return;
    };
    let problem = match base64::engine::general_purpose::STANDARD.decode(new) {
        Err(_) => Some("must be base64-encoded PEM".to_string()),
        Ok(pem) => certificate_problem(&pem),
    };
    if let Some(problem) = problem {
        causes.push(raw_invalid(
            "status.certificate",
            "\"<certificate data>\"",
            &problem,
        ));
    }
}

fn certificate_problem(pem: &[u8]) -> Option<String> {
    let mut blocks = 0;
    for block in x509_parser::pem::Pem::iter_from_buffer(pem) {
        let Ok(block) = block else { break };
        if block.label != "CERTIFICATE" {
            return Some(format!(
                "only CERTIFICATE PEM blocks are allowed, found {:?}",
                block.label
            ));
        }
        blocks += 1;
        if x509_parser::parse_x509_certificate(&block.contents).is_err() {
            return Some("x509: malformed certificate".into());
        }
    }
    (blocks == 0).then(|| "must contain at least one CERTIFICATE PEM block".into())
}

fn raw_invalid(field: &str, shown: &str, detail: &str) -> Cause {
    Cause {
        reason: "FieldValueInvalid",
        field: field.to_string(),
        message: format!("Invalid value: {shown}: {detail}"),
    }
}

fn not_supported(field: &str, value: &str, allowed: &[&str]) -> Cause {
    let list: Vec<String> = allowed.iter().map(|a| format!("{a:?}")).collect();
    Cause {
        reason: "FieldValueNotSupported",
        field: field.to_string(),
        message: format!(
            "Unsupported value: {value:?}: supported values: {}",
            list.join(", ")
        ),
    }
}

fn duplicate(field: &str, value: &str) -> Cause {
    Cause {
        reason: "FieldValueDuplicate",
        field: field.to_string(),
        message: format!("Duplicate value: {value:?}"),
    }
}

fn too_long(field: &str, max: usize) -> Cause {
    Cause {
        reason: "FieldValueTooLong",
        field: field.to_string(),
        message: format!("Too long: may not be more than {max} bytes"),
    }
}

/// Go's `%#v` of a `[]byte`, as kube-apiserver shows a request it could not read.
fn go_bytes(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "[]byte(nil)".into();
    }
    let parts: Vec<String> = bytes.iter().map(|b| format!("0x{b:x}")).collect();
    format!("[]byte{{{}}}", parts.join(", "))
}

#[cfg(test)]
mod tests;
