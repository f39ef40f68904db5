//! How a start runs, decided once from the data directory and the flags: a single server, the
//! first member of a new cluster (`--cluster-init`), a server joining one (`--server URL`), or
//! a member restarting (its data directory holds `raft/member.json`, and then the flags are
//! ignored: a data directory that belongs to a cluster always restarts as that member).
//!
//! Every server has a cluster secret, a single one too: node agents join any server with the
//! same token (`<data-dir>/join-token`). A single server keeps its secret in
//! `<data-dir>/cluster-secret` like a member, so `--cluster-init` on its directory later keeps
//! the token its agents already hold.

use super::error::{read_optional, write_file, ClusterError};
use super::join;
use super::join_token::{ClusterSecret, JoinToken};
use super::member::{ClusterDir, Identity};
use super::protocol::JoinBundle;
use crate::storage::fsutil::SECRET_MODE;

/// `--cluster-init`, `--server`, `--raft-port` and the `LITEK8S_TOKEN` environment variable.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ClusterFlags {
    pub init: bool,
    pub server: Option<String>,
    pub raft_port: Option<u16>,
    pub token: Option<String>,
}

impl std::fmt::Debug for ClusterFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterFlags")
            .field("init", &self.init)
            .field("server", &self.server)
            .field("raft_port", &self.raft_port)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// How this start runs.
#[derive(Debug)]
pub enum Mode {
    /// No cluster: objects.wal. The secret authenticates agents joining it.
    Single { secret: ClusterSecret },
    /// `--cluster-init` on a directory that is not a member yet.
    Init { secret: ClusterSecret },
    /// `--server URL` on a directory that is not a member yet.
    Join { addr: String, token: JoinToken },
    /// The directory belongs to a cluster.
    Member(Identity),
}

/// Decides the mode from the data directory and the flags.
pub fn decide(flags: &ClusterFlags, dir: &ClusterDir) -> Result<Mode, ClusterError> {
    if let Some(identity) = dir.identity()? {
        if flags.init || flags.server.is_some() {
            tracing::info!(
                name = %identity.name,
                node_id = identity.node_id,
                "the data directory already belongs to a cluster: --cluster-init/--server ignored, restarting as that member"
            );
        }
        return Ok(Mode::Member(identity));
    }
    let token = flags
        .token
        .as_deref()
        .map(JoinToken::parse)
        .transpose()
        .map_err(|e| ClusterError::Config(format!("LITEK8S_TOKEN: {e}")))?;
    if flags.init {
        let secret = own_secret(dir, token)?;
        return Ok(Mode::Init { secret });
    }
    if let Some(url) = &flags.server {
        let addr = join::server_address(url).map_err(|e| ClusterError::Config(e.to_string()))?;
        let token = token.ok_or_else(|| {
            ClusterError::Config(
                "joining needs the join token in the LITEK8S_TOKEN environment variable".into(),
            )
        })?;
        return Ok(Mode::Join { addr, token });
    }
    Ok(Mode::Single {
        secret: own_secret(dir, token)?,
    })
}

/// The secret of a server that owns its cluster (a single server, `--cluster-init`): the one
/// `LITEK8S_TOKEN` gives, else the one this directory already holds (a single server turning
/// into the first member keeps the token its agents joined with), else a new one.
fn own_secret(dir: &ClusterDir, token: Option<JoinToken>) -> Result<ClusterSecret, ClusterError> {
    if let Some(token) = token {
        return Ok(token.secret);
    }
    if read_optional(&dir.secret_file())?.is_some() {
        return read_secret(dir);
    }
    Ok(ClusterSecret::generate())
}

/// Writes the secret and `<data-dir>/join-token` (`K10<sha256 of ca_pem>::server:<secret>`,
/// what servers and agents join with), both 0600.
pub fn write_secret_and_token(
    dir: &ClusterDir,
    ca_pem: &str,
    secret: &ClusterSecret,
) -> Result<(), ClusterError> {
    write_secret(dir, secret)?;
    let token = JoinToken::for_cluster(ca_pem, secret);
    write_file(
        &dir.join_token_file(),
        format!("{token}\n").as_bytes(),
        SECRET_MODE,
    )
}

/// The first step of a join, before the server loads its certificates: fetch the cluster CA
/// (refused unless its hash is the token's), then the bundle the cluster shares (CA key,
/// admin token), and keep the cluster secret in `dir`. The caller stores the bundle's server
/// files.
pub async fn fetch_join_bundle(
    dir: &ClusterDir,
    addr: &str,
    token: &JoinToken,
) -> Result<JoinBundle, ClusterError> {
    let failed = |e: join::JoinError| ClusterError::Join {
        addr: addr.to_string(),
        reason: e.to_string(),
    };
    let ca = join::fetch_verified_ca(addr, token).await.map_err(failed)?;
    let bundle = join::fetch_bundle(addr, &ca, token).await.map_err(failed)?;
    write_secret(dir, &token.secret)?;
    tracing::info!(%addr, members = bundle.members.len(), "received the join bundle");
    Ok(bundle)
}

pub(super) fn write_secret(dir: &ClusterDir, secret: &ClusterSecret) -> Result<(), ClusterError> {
    write_file(
        &dir.secret_file(),
        format!("{}\n", secret.as_str()).as_bytes(),
        SECRET_MODE,
    )
}

pub(super) fn read_secret(dir: &ClusterDir) -> Result<ClusterSecret, ClusterError> {
    let path = dir.secret_file();
    let text = read_optional(&path)?.ok_or_else(|| {
        ClusterError::corrupt(&path, "missing: the cluster secret of this member")
    })?;
    ClusterSecret::new(text.trim()).map_err(|e| ClusterError::corrupt(&path, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(init: bool, token: Option<&str>) -> ClusterFlags {
        ClusterFlags {
            init,
            token: token.map(str::to_string),
            ..ClusterFlags::default()
        }
    }

    fn secret_of(mode: Mode) -> ClusterSecret {
        match mode {
            Mode::Single { secret } | Mode::Init { secret } => secret,
            other => panic!("unexpected mode {other:?}"),
        }
    }

    #[test]
    fn a_single_server_keeps_its_secret_into_cluster_init() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = ClusterDir::new(tmp.path());
        let first = secret_of(decide(&flags(false, None), &dir).unwrap());
        write_secret_and_token(&dir, "CA", &first).unwrap();
        let token = std::fs::read_to_string(dir.join_token_file()).unwrap();
        assert_eq!(token.trim(), JoinToken::for_cluster("CA", &first));
        // Restarting, and then forming a cluster on the same directory, keep it.
        assert_eq!(secret_of(decide(&flags(false, None), &dir).unwrap()), first);
        assert_eq!(secret_of(decide(&flags(true, None), &dir).unwrap()), first);
        // A token given explicitly wins.
        let given = "given-secret-0123456789";
        assert_eq!(
            secret_of(decide(&flags(true, Some(given)), &dir).unwrap()).as_str(),
            given
        );
        // A fresh directory gets a fresh secret.
        let other = tempfile::tempdir().unwrap();
        let fresh = secret_of(decide(&flags(false, None), &ClusterDir::new(other.path())).unwrap());
        assert_ne!(fresh, first);
    }

    #[test]
    fn a_damaged_secret_file_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = ClusterDir::new(tmp.path());
        std::fs::write(dir.secret_file(), "short\n").unwrap();
        assert!(matches!(
            decide(&flags(false, None), &dir),
            Err(ClusterError::Corrupt { .. })
        ));
    }
}
