//! Which process listens on a TCP port, from the kernel's socket tables.
//!
//! `/proc/net/tcp` and `/proc/net/tcp6` list this network namespace's sockets: the local
//! address as hex `ADDR:PORT`, the state (`0A` is LISTEN) and the socket's inode. A process
//! holds the socket when one of its `/proc/<pid>/fd/*` links reads `socket:[<inode>]`. Other
//! users' processes are only visible to root; an unreadable one is skipped, and the port is
//! then reported as taken by an unknown process.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};

/// A process holding a port.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Holder {
    pub pid: u32,
    /// Its `comm` (the executable's name, at most 15 bytes).
    pub command: String,
}

/// Whether a port can be taken, and if not, by whom it is held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortState {
    Free,
    /// Listening sockets on the port were found; `holders` is empty when their processes
    /// could not be read.
    Listening {
        holders: Vec<Holder>,
    },
    /// Nothing listens, but binding failed (a socket bound without listening, or no
    /// permission): the error.
    Unbindable(String),
}

/// The state of TCP `port` on every address.
pub fn tcp_port_state(port: u16) -> PortState {
    let inodes: BTreeSet<u64> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|text| listening_inodes(&text, port))
        .collect();
    if !inodes.is_empty() {
        return PortState::Listening {
            holders: holders_of(&inodes),
        };
    }
    match TcpListener::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, port))) {
        Ok(_) => PortState::Free,
        Err(e) => PortState::Unbindable(e.to_string()),
    }
}

/// The inodes of the LISTEN sockets on `port` in one `/proc/net/tcp*` table.
pub fn listening_inodes(table: &str, port: u16) -> Vec<u64> {
    const LISTEN: &str = "0A";
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local = fields.get(1)?;
            let state = fields.get(3)?;
            let inode = fields.get(9)?;
            let (_, hex_port) = local.rsplit_once(':')?;
            let local_port = u16::from_str_radix(hex_port, 16).ok()?;
            (local_port == port && *state == LISTEN)
                .then(|| inode.parse().ok())
                .flatten()
        })
        .filter(|inode| *inode != 0)
        .collect()
}

/// The processes with a descriptor on one of `inodes`.
fn holders_of(inodes: &BTreeSet<u64>) -> Vec<Holder> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut holders = BTreeSet::new();
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .ok()
                .and_then(|target| socket_inode(&target.to_string_lossy()))
                .is_some_and(|inode| inodes.contains(&inode))
        });
        if holds {
            let command = std::fs::read_to_string(entry.path().join("comm"))
                .map(|c| c.trim().to_string())
                .unwrap_or_else(|_| "?".to_string());
            holders.insert(Holder { pid, command });
        }
    }
    holders.into_iter().collect()
}

/// `socket:[12345]` -> 12345.
fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:192B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0
   1: 0100007F:192B 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 4243 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:192C 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4244 1 0000000000000000 100 0 0 10 0
   3: garbage
";

    #[test]
    fn only_listening_sockets_on_the_port_count() {
        // 0x192B = 6443; the established connection (state 01) and port 6444 do not count.
        assert_eq!(listening_inodes(TABLE, 6443), vec![4242]);
        assert_eq!(listening_inodes(TABLE, 6444), vec![4244]);
        assert!(listening_inodes(TABLE, 80).is_empty());
    }

    #[test]
    fn a_port_this_process_listens_on_names_this_process() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        match tcp_port_state(port) {
            PortState::Listening { holders } => {
                assert!(
                    holders.iter().any(|h| h.pid == std::process::id()),
                    "{holders:?}"
                );
            }
            other => panic!("expected Listening, got {other:?}"),
        }
        drop(listener);
        assert_eq!(socket_inode("socket:[77]"), Some(77));
        assert_eq!(socket_inode("pipe:[77]"), None);
    }
}
