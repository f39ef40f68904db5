use base64::Engine;
use rcgen::{CertificateParams, DnType, KeyPair};
use serde_json::{json, Value};

use super::*;

fn csr_pem(cn: &str, orgs: &[&str]) -> String {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    for org in orgs {
        params
            .distinguished_name
            .push(DnType::OrganizationName, *org);
    }
    params.serialize_request(&key).unwrap().pem().unwrap()
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn csr(request: &str) -> Value {
    json!({"metadata": {"name": "c"}, "spec": {
        "request": b64(request), "signerName": KUBE_APISERVER_CLIENT,
        "usages": ["client auth"]}})
}

fn messages(causes: &[Cause]) -> Vec<String> {
    causes
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect()
}

#[test]
fn a_request_is_read_and_its_signature_verified() {
    let pem = csr_pem("alice", &["devs"]);
    let parsed = parse_request(pem.as_bytes()).unwrap();
    assert_eq!(parsed.common_name, "alice");
    assert_eq!(parsed.organizations, ["devs"]);
    assert_eq!(messages(&causes(None, &csr(&pem))), Vec::<String>::new());
    // A changed byte in the signed part: the signature no longer verifies.
    let der = x509_parser::pem::Pem::iter_from_buffer(pem.as_bytes())
        .next()
        .unwrap()
        .unwrap()
        .contents;
    let mut tampered = der.clone();
    let at = tampered.windows(5).position(|w| w == b"alice").unwrap();
    tampered[at] = b'b';
    let text = base64::engine::general_purpose::STANDARD.encode(&tampered);
    let bad =
        format!("-----BEGIN CERTIFICATE REQUEST-----\n{text}\n-----END CERTIFICATE REQUEST-----\n");
    assert_eq!(
        parse_request(bad.as_bytes()).unwrap_err(),
        "x509: ECDSA verification failure"
    );
}

#[test]
fn bad_specs_get_kube_apiservers_messages() {
    let garbage = causes(None, &csr("hello"));
    assert_eq!(
        messages(&garbage),
        ["spec.request: Invalid value: []byte{0x68, 0x65, 0x6c, 0x6c, 0x6f}: PEM block type must be CERTIFICATE REQUEST"]
    );
    let pem = csr_pem("alice", &[]);
    let mut object = csr(&pem);
    object["spec"]["usages"] = json!(["client auth", "flying", "client auth"]);
    object["spec"]["signerName"] = json!("example");
    object["spec"]["expirationSeconds"] = json!(599);
    let found = messages(&causes(None, &object));
    assert_eq!(found.len(), 4, "{found:#?}");
    assert!(found[0].starts_with("spec.usages[1]: Unsupported value: \"flying\": supported values: \"any\", \"cert sign\""), "{found:#?}");
    assert_eq!(found[1], "spec.usages[2]: Duplicate value: \"client auth\"");
    assert_eq!(found[2], "spec.signerName: Invalid value: \"example\": must be a fully qualified domain and path of the form 'example.com/signer-name'");
    assert_eq!(found[3], "spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 600 seconds (10 minutes)");
    object["spec"]["signerName"] = json!("");
    object["spec"]["usages"] = json!([]);
    object["spec"]
        .as_object_mut()
        .unwrap()
        .remove("expirationSeconds");
    assert_eq!(
        messages(&causes(None, &object)),
        [
            "spec.usages: Required value",
            "spec.signerName: Required value"
        ]
    );
}

#[test]
fn conditions_are_exclusive_and_never_removed() {
    let pem = csr_pem("alice", &[]);
    let old = csr(&pem);
    let mut both = old.clone();
    both["status"] = json!({"conditions": [
        {"type": "Approved", "status": "True"}, {"type": "Denied", "status": "True"}]});
    assert_eq!(
        messages(&causes(Some(&old), &both)),
        ["status.conditions[1].type: Invalid value: \"Denied\": Approved and Denied conditions are mutually exclusive"]
    );
    let mut approved = old.clone();
    approved["status"] = json!({"conditions": [{"type": "Approved", "status": "True"}]});
    assert!(causes(Some(&old), &approved).is_empty());
    assert_eq!(
        messages(&causes(Some(&approved), &old)),
        ["status.conditions: Forbidden: updates may not remove a condition of type \"Approved\""]
    );
    let mut issued = approved.clone();
    issued["status"]["certificate"] = json!(b64("not pem"));
    assert_eq!(
        messages(&causes(Some(&approved), &issued)),
        ["status.certificate: Invalid value: \"<certificate data>\": must contain at least one CERTIFICATE PEM block"]
    );
}
