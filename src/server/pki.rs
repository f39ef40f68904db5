//! The cluster CA and the serving certificate: generated on first start, loaded afterwards,
//! and the serving certificate reissued when its names change or it nears expiry.
//!
//! Keys are ECDSA P-256. The CA is valid for 10 years; the serving certificate for one year
//! and is reissued when fewer than 30 days remain. `server.crt` starts with one explanatory
//! line, `# litek8s SANs: <name>,<name>,...`, recording the names it was issued for; PEM
//! readers (rustls, Go, OpenSSL) skip text before `-----BEGIN`. A change of that set (a new
//! `--node-ip`, a new hostname) reissues the certificate; the CA is never replaced.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use chrono::{Datelike, Duration as Days, Utc};
use rand::RngCore;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType, SerialNumber,
};
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

use super::datadir::{read_optional, write_file, DataDir, PUBLIC_MODE, SECRET_MODE};
use super::error::ServerError;
use super::settings::ServerSettings;

const SAN_HEADER: &str = "# litek8s SANs: ";
const CA_YEARS: i64 = 10;
const SERVING_DAYS: i64 = 365;
const RENEW_BEFORE_DAYS: u64 = 30;

/// PEM material the TLS listener and the kubeconfig need.
#[derive(Debug, Clone)]
pub struct Pki {
    pub ca_cert_pem: String,
    pub server_cert_pem: String,
    pub server_key_pem: String,
}

/// The names the serving certificate must carry, sorted and deduplicated so that two sets
/// compare equal exactly when they name the same things.
pub fn serving_names(settings: &ServerSettings) -> Vec<String> {
    let mut names: Vec<String> = [
        "127.0.0.1",
        "::1",
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    names.push(settings.hostname.to_ascii_lowercase());
    names.push(settings.kubernetes_service_ip.to_string());
    names.extend(settings.node_ips.iter().map(IpAddr::to_string));
    if !settings.listen.ip().is_unspecified() {
        names.push(settings.listen.ip().to_string());
    }
    names.retain(|n| !n.is_empty());
    names.sort();
    names.dedup();
    names
}

/// Loads the CA and serving certificate from `dir`, creating or reissuing what is missing.
pub fn load_or_create(dir: &DataDir, names: &[String]) -> Result<Pki, ServerError> {
    let (ca_key, ca_cert_pem) = load_or_create_ca(dir)?;
    // rcgen signs with a `Certificate` for the issuer; rebuilding it from the same parameters
    // and key gives the same subject and key identifier as the stored ca.crt.
    let issuer = ca_params()?
        .self_signed(&ca_key)
        .map_err(crypto("the CA certificate"))?;

    let cert_path = dir.server_cert();
    let key_path = dir.server_key();
    let existing = (read_optional(&cert_path)?, read_optional(&key_path)?);
    if let (Some(cert_pem), Some(key_pem)) = &existing {
        match check_serving(
            &cert_path,
            cert_pem,
            &key_path,
            key_pem,
            &ca_cert_pem,
            names,
        )? {
            None => {
                return Ok(Pki {
                    ca_cert_pem,
                    server_cert_pem: cert_pem.clone(),
                    server_key_pem: key_pem.clone(),
                })
            }
            Some(reason) => tracing::info!(%reason, "reissuing the serving certificate"),
        }
    }

    let key = KeyPair::generate().map_err(crypto("the serving key"))?;
    let cert = serving_params(names)?
        .signed_by(&key, &issuer, &ca_key)
        .map_err(crypto("the serving certificate"))?;
    let cert_pem = format!("{SAN_HEADER}{}\n{}", names.join(","), cert.pem());
    let key_pem = key.serialize_pem();
    // Key first: a crash between the two writes leaves a key that does not match the old
    // certificate, which the next start detects and reissues.
    write_file(&key_path, key_pem.as_bytes(), SECRET_MODE)?;
    write_file(&cert_path, cert_pem.as_bytes(), PUBLIC_MODE)?;
    Ok(Pki {
        ca_cert_pem,
        server_cert_pem: cert_pem,
        server_key_pem: key_pem,
    })
}

fn load_or_create_ca(dir: &DataDir) -> Result<(KeyPair, String), ServerError> {
    let (cert_path, key_path) = (dir.ca_cert(), dir.ca_key());
    match (read_optional(&cert_path)?, read_optional(&key_path)?) {
        (Some(cert_pem), Some(key_pem)) => {
            let der = first_cert(&cert_path, &cert_pem)?;
            let key = parse_key(&key_path, &key_pem)?;
            if !holds_public_key(&der, &key) {
                return Err(ServerError::corrupt(
                    &key_path,
                    format!("does not match {}", cert_path.display()),
                ));
            }
            Ok((key, cert_pem))
        }
        (None, None) => {
            let key = KeyPair::generate().map_err(crypto("the CA key"))?;
            let cert = ca_params()?
                .self_signed(&key)
                .map_err(crypto("the CA certificate"))?;
            write_file(&key_path, key.serialize_pem().as_bytes(), SECRET_MODE)?;
            write_file(&cert_path, cert.pem().as_bytes(), PUBLIC_MODE)?;
            tracing::info!(path = %cert_path.display(), "generated the cluster CA");
            Ok((key, cert.pem()))
        }
        (Some(_), None) => Err(ServerError::corrupt(
            &key_path,
            format!("missing, but {} exists", cert_path.display()),
        )),
        (None, Some(_)) => Err(ServerError::corrupt(
            &cert_path,
            format!("missing, but {} exists", key_path.display()),
        )),
    }
}

/// `None` if the stored serving certificate can be kept, else why it must be reissued.
fn check_serving(
    cert_path: &Path,
    cert_pem: &str,
    key_path: &Path,
    key_pem: &str,
    ca_cert_pem: &str,
    names: &[String],
) -> Result<Option<String>, ServerError> {
    let der = first_cert(cert_path, cert_pem)?;
    let key = parse_key(key_path, key_pem)?;
    let recorded = cert_pem
        .lines()
        .next()
        .and_then(|l| l.strip_prefix(SAN_HEADER))
        .unwrap_or_default();
    if recorded != names.join(",") {
        return Ok(Some(format!("names changed from [{recorded}]")));
    }
    if !holds_public_key(&der, &key) {
        return Ok(Some("server.key does not match server.crt".into()));
    }
    // Verifying as a client would (chain to our CA, name, validity RENEW_BEFORE_DAYS from
    // now) catches a certificate from another CA and one about to expire.
    let mut roots = rustls::RootCertStore::empty();
    for ca in rustls_pemfile::certs(&mut ca_cert_pem.as_bytes()).flatten() {
        let _ = roots.add(ca);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| ServerError::corrupt(cert_path, e.to_string()))?;
    let later = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        + std::time::Duration::from_secs(RENEW_BEFORE_DAYS * 86_400);
    let verdict = verifier.verify_server_cert(
        &der,
        &[],
        &ServerName::try_from("localhost")
            .map_err(|e| ServerError::corrupt(cert_path, e.to_string()))?,
        &[],
        UnixTime::since_unix_epoch(later),
    );
    Ok(verdict
        .err()
        .map(|e| format!("does not verify against ca.crt in {RENEW_BEFORE_DAYS} days: {e}")))
}

fn first_cert(path: &Path, pem: &str) -> Result<CertificateDer<'static>, ServerError> {
    match rustls_pemfile::certs(&mut pem.as_bytes()).next() {
        Some(Ok(der)) => Ok(der),
        Some(Err(e)) => Err(ServerError::corrupt(path, format!("bad PEM: {e}"))),
        None => Err(ServerError::corrupt(path, "no PEM certificate in file")),
    }
}

fn parse_key(path: &Path, pem: &str) -> Result<KeyPair, ServerError> {
    KeyPair::from_pem(pem).map_err(|e| ServerError::corrupt(path, format!("bad private key: {e}")))
}

/// Whether a certificate carries `key`'s public key (the raw EC point appears verbatim in
/// the SubjectPublicKeyInfo).
fn holds_public_key(cert_der: &[u8], key: &KeyPair) -> bool {
    let public = key.public_key_raw();
    !public.is_empty() && cert_der.windows(public.len()).any(|w| w == public)
}

fn ca_params() -> Result<CertificateParams, ServerError> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(crypto("CA params"))?;
    params
        .distinguished_name
        .push(DnType::CommonName, "litek8s-ca");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    set_validity(&mut params, CA_YEARS * 365 + CA_YEARS / 4);
    Ok(params)
}

fn serving_params(names: &[String]) -> Result<CertificateParams, ServerError> {
    let mut params =
        CertificateParams::new(Vec::<String>::new()).map_err(crypto("serving params"))?;
    params
        .distinguished_name
        .push(DnType::CommonName, "litek8s-apiserver");
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    for name in names {
        let san = match name.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => {
                SanType::DnsName(name.clone().try_into().map_err(|e| ServerError::Crypto {
                    what: "serving certificate names",
                    reason: format!("{name:?}: {e}"),
                })?)
            }
        };
        params.subject_alt_names.push(san);
    }
    set_validity(&mut params, SERVING_DAYS);
    Ok(params)
}

/// Valid from yesterday (tolerates clocks behind ours) for `days` days, at day granularity.
fn set_validity(params: &mut CertificateParams, days: i64) {
    let from = Utc::now() - Days::days(1);
    let until = Utc::now() + Days::days(days);
    params.not_before = rcgen::date_time_ymd(from.year(), from.month() as u8, from.day() as u8);
    params.not_after = rcgen::date_time_ymd(until.year(), until.month() as u8, until.day() as u8);
    let mut serial = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut serial);
    serial[0] &= 0x7f; // positive INTEGER
    params.serial_number = Some(SerialNumber::from_slice(&serial));
}

fn crypto(what: &'static str) -> impl Fn(rcgen::Error) -> ServerError {
    move |e| ServerError::Crypto {
        what,
        reason: e.to_string(),
    }
}
