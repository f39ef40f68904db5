use base64::Engine;
use rcgen::{BasicConstraints, IsCa};

use super::*;

fn ca() -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, "test-ca");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn parsed(cn: &str, orgs: &[&str], dns: &[&str]) -> ParsedRequest {
    let key = KeyPair::generate().unwrap();
    let mut params =
        CertificateParams::new(dns.iter().map(|d| d.to_string()).collect::<Vec<_>>()).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    for org in orgs {
        params
            .distinguished_name
            .push(DnType::OrganizationName, *org);
    }
    let pem = params.serialize_request(&key).unwrap().pem().unwrap();
    certificates::parse_request(pem.as_bytes()).unwrap()
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn signs_the_requested_subject_for_the_requested_time() {
    let (ca_pem, ca_key) = ca();
    let request = parsed("alice", &["devs"], &[]);
    let usages = strings(&["digital signature", "client auth"]);
    let pem = sign(
        &ca_pem,
        &ca_key,
        &request,
        &usages,
        Duration::from_secs(3600),
    )
    .unwrap();
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
    let cert = block.parse_x509().unwrap();
    let cn: Vec<_> = cert
        .subject()
        .iter_common_name()
        .map(|a| a.as_str().unwrap())
        .collect();
    let org: Vec<_> = cert
        .subject()
        .iter_organization()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!((cn, org), (vec!["alice"], vec!["devs"]));
    assert_eq!(cert.public_key().raw, request.public_key_der.as_slice());
    let lifetime = cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp();
    assert_eq!(lifetime, 3600 + 300);
    let (_, ca) = x509_parser::pem::parse_x509_pem(ca_pem.as_bytes()).unwrap();
    let ca = ca.parse_x509().unwrap();
    assert!(cert.verify_signature(Some(ca.public_key())).is_ok());
    assert!(base64::engine::general_purpose::STANDARD.encode(&pem).len() > 100);
}

#[test]
fn the_kubelet_signer_takes_only_node_subjects() {
    let node_usages = strings(&["digital signature", "client auth"]);
    let node = parsed("system:node:n1", &["system:nodes"], &[]);
    assert_eq!(kubelet_client_problem(&node, &node_usages), None);
    let rsa = strings(&["key encipherment", "digital signature", "client auth"]);
    assert_eq!(kubelet_client_problem(&node, &rsa), None);
    for (request, usages, message) in [
        (
            parsed("alice", &["system:nodes"], &[]),
            &node_usages,
            "subject common name does not begin with system:node:",
        ),
        (
            parsed("system:node:n1", &["devs"], &[]),
            &node_usages,
            "subject organization is not system:nodes",
        ),
        (
            parsed("system:node:n1", &["system:nodes"], &["n1.example"]),
            &node_usages,
            "DNS subjectAltNames are not allowed",
        ),
        (
            parsed("system:node:n1", &["system:nodes"], &[]),
            &strings(&["client auth"]),
            "usages did not match [client auth digital signature key encipherment]",
        ),
    ] {
        assert_eq!(
            kubelet_client_problem(&request, usages).as_deref(),
            Some(message)
        );
    }
    assert_eq!(client_usages_problem(&strings(&["client auth"])), None);
    assert_eq!(
        client_usages_problem(&strings(&["server auth", "client auth"])).as_deref(),
        Some("invalid usage for client certificate: server auth")
    );
    assert_eq!(
        client_usages_problem(&strings(&["digital signature"])).as_deref(),
        Some("missing required usage for client certificate: client auth")
    );
}
