//! What a host runs now, read over ssh by one small script: its hostname (the name it has in
//! the cluster), the hash of its `/usr/bin/litek8s`, and for each unit whether it is installed
//! (enabled), active, and which server its settings join.

use super::binary::LocalBinary;
use super::plan::{HostState, Unit};

/// The script: prints `key=value` lines, changes nothing. The binary's fingerprint is
/// computed as `binary` computes it here.
pub fn script(binary: &LocalBinary) -> String {
    format!(
        "echo \"hostname=$(cat /proc/sys/kernel/hostname)\"\n{}\n{UNITS}{}",
        binary.probe_line(),
        super::packages::probe_lines()
    )
}

const UNITS: &str = r#"for d in server agent; do
  if [ -f /etc/default/litek8s-$d ] && systemctl is-enabled -q litek8s-$d 2>/dev/null; then
    echo "$d.active=$(systemctl is-active litek8s-$d)"
    echo "$d.url=$(sed -n 's/^LITEK8S_SERVER_URL="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' /etc/default/litek8s-$d | tail -n 1)"
  fi
done
"#;

/// Reads the script's output.
pub fn parse(output: &str) -> Result<HostState, String> {
    let mut state = HostState::default();
    for line in output.lines() {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let value = value.trim();
        match key {
            "hostname" => state.hostname = value.to_string(),
            "binary" if !value.is_empty() => state.binary = Some(value.to_string()),
            "server.active" | "agent.active" => {
                let u = unit(&mut state, key);
                u.active = value == "active";
                u.state = value.to_string();
            }
            "server.url" | "agent.url" => {
                unit(&mut state, key).server_url = (!value.is_empty()).then(|| value.to_string());
            }
            _ if key.starts_with("package.") && !value.is_empty() => {
                state
                    .packages
                    .insert(key["package.".len()..].to_string(), value.to_string());
            }
            _ => {}
        }
    }
    if state.hostname.is_empty() {
        return Err("the probe printed no hostname".into());
    }
    Ok(state)
}

/// The unit a `server.*` or `agent.*` key is about.
fn unit<'a>(state: &'a mut HostState, key: &str) -> &'a mut Unit {
    let slot = if key.starts_with("server.") {
        &mut state.server
    } else {
        &mut state.agent
    };
    slot.get_or_insert_with(Unit::default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_host() {
        let s = parse("hostname=lk1\nbinary=\n").expect("parsed");
        assert_eq!(s.hostname, "lk1");
        assert_eq!((s.binary, s.server, s.agent), (None, None, None));
    }

    #[test]
    fn an_installed_server_with_its_agent() {
        let s = parse(
            "hostname=lk2\nbinary=ab12\nserver.active=active\nserver.url=https://10.0.0.1:6443\n\
             agent.active=activating\nagent.url=https://127.0.0.1:6443\npackage.litek8s=1.2-1\n",
        )
        .expect("parsed");
        assert_eq!(s.packages.get("litek8s").map(String::as_str), Some("1.2-1"));
        assert_eq!(s.binary.as_deref(), Some("ab12"));
        let server = s.server.expect("server");
        assert!(server.active);
        assert_eq!(server.server_url.as_deref(), Some("https://10.0.0.1:6443"));
        let agent = s.agent.expect("agent");
        assert!(!agent.active);
    }

    #[test]
    fn the_first_server_joined_nothing() {
        let s = parse("hostname=lk1\nserver.active=active\nserver.url=\n").expect("parsed");
        assert_eq!(s.server.expect("server").server_url, None);
    }

    #[test]
    fn no_hostname_is_an_error() {
        assert!(parse("").is_err());
    }

    #[test]
    fn the_script_runs_on_this_machine() {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(script(&LocalBinary::current().expect("fingerprint")))
            .output()
            .expect("sh");
        assert!(out.status.success(), "{out:?}");
        let s = parse(&String::from_utf8_lossy(&out.stdout)).expect("parsed");
        assert!(!s.hostname.is_empty());
    }
}
