#!/bin/sh
# Tests of packaging/litek8s-server-prestart (against a temporary root with fake `ss`, `ip`
# and `litek8s` commands) and packaging/litek8s-agent-prestart.
# Usage: sh tests/packaging_hooks.sh   (exit 0 = all passed)
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
hook=$here/packaging/litek8s-server-prestart
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
passed=0
failed=0

ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
check() { name=$1; shift; if "$@"; then ok "$name"; else bad "$name"; fi; }

# Fakes. ss prints what $FAKE_SS_OUT holds; litek8s --help mentions the flags in $FAKE_FLAGS.
mkdir -p "$work/bin"
cat >"$work/bin/ss" <<'F'
#!/bin/sh
[ -n "${FAKE_SS_OUT:-}" ] && printf '%s\n' "$FAKE_SS_OUT"
exit 0
F
cat >"$work/bin/litek8s" <<'F'
#!/bin/sh
echo "Usage: litek8s apiserver [OPTIONS]"
echo "  Prose mentioning --cluster-init and --server is not a flag."
echo "      --service-cidr <CIDR>"
for f in ${FAKE_FLAGS:-}; do echo "      $f"; done
F
cat >"$work/bin/ip" <<'F'
#!/bin/sh
[ -n "${FAKE_IP:-}" ] || exit 2
echo "192.0.2.1 via 10.0.0.1 dev eth0 src $FAKE_IP uid 0"
F
chmod +x "$work/bin/"*

# run NAME [VAR=value...]: runs the hook in a fresh root; stdout+stderr in $out, status in $rc.
fresh() { root=$work/root-$1; rm -rf "$root"; mkdir -p "$root"; }
run() {
    out=$(env LITEK8S_ROOT="$root" LITEK8S_SS="$work/bin/ss" LITEK8S_BIN="$work/bin/litek8s" \
        LITEK8S_IP="$work/bin/ip" "$@" sh "$hook" 2>&1) && rc=0 || rc=$?
}
token_of() { sed -n 's/^LITEK8S_TOKEN=//p' "$root/etc/litek8s/server.env"; }
args_of() { cat "$root/run/litek8s/server-args"; }
mode_of() { stat -c %a "$1"; }
contains() { case $1 in *"$2"*) return 0 ;; esac; return 1; }

# 1. First start, cluster-init: secret generated, 0600, cluster args, node ip detected.
fresh init
run FAKE_FLAGS="--cluster-init --server" FAKE_IP=10.0.0.5
check "init: exit 0" [ "$rc" = 0 ]
check "init: server.env is 0600" [ "$(mode_of "$root/etc/litek8s/server.env")" = 600 ]
check "init: /etc/litek8s is 0700" [ "$(mode_of "$root/etc/litek8s")" = 700 ]
first=$(token_of)
check "init: secret is 64 hex chars" sh -c 'printf %s "$1" | grep -Eqx "[0-9a-f]{64}"' _ "$first"
check "init: args have --cluster-init and node ip" \
    [ "$(args_of)" = "LITEK8S_CLUSTER_ARGS=--cluster-init --node-ip 10.0.0.5" ]

# 2. Second start keeps the secret.
run FAKE_FLAGS="--cluster-init --server" FAKE_IP=10.0.0.5
check "restart: token unchanged" [ "$(token_of)" = "$first" ]

# 3. After the server wrote its K10 join token, the next start finalizes server.env.
mkdir -p "$root/var/lib/litek8s/apiserver"
printf 'K10abcdef::server:%s\n' "$first" >"$root/var/lib/litek8s/apiserver/join-token"
run FAKE_FLAGS="--cluster-init"
check "finalize: exit 0" [ "$rc" = 0 ]
check "finalize: K10 token in server.env" [ "$(token_of)" = "K10abcdef::server:$first" ]
check "finalize: still 0600" [ "$(mode_of "$root/etc/litek8s/server.env")" = 600 ]
printf 'garbage\n' >"$root/var/lib/litek8s/apiserver/join-token"
run FAKE_FLAGS="--cluster-init"
check "finalize: a bad join-token is refused" [ "$rc" = 1 ]
check "finalize: ... and server.env is kept" [ "$(token_of)" = "K10abcdef::server:$first" ]

# 4. Another root gets another secret (golden image clones).
fresh init2
run FAKE_FLAGS="--cluster-init"
check "clone: different secret" [ "$(token_of)" != "$first" ]
check "clone: no node ip when there is no route" [ "$(args_of)" = "LITEK8S_CLUSTER_ARGS=--cluster-init" ]

# 5. A build without --cluster-init starts a single server.
fresh single
run FAKE_FLAGS=""
check "single: exit 0" [ "$rc" = 0 ]
check "single: empty cluster args" [ "$(args_of)" = "LITEK8S_CLUSTER_ARGS=" ]
check "single: says so" contains "$out" "no --cluster-init"

# 6. Join without a token: one-line error naming the file, exit 1, nothing generated.
fresh join
run FAKE_FLAGS="--cluster-init --server" LITEK8S_SERVER_URL=https://lk1:6443
check "join without token: exit 1" [ "$rc" = 1 ]
check "join without token: one line" [ "$(printf '%s\n' "$out" | wc -l)" = 1 ]
check "join without token: names server.env" contains "$out" "etc/litek8s/server.env"
check "join without token: no token generated" [ ! -e "$root/etc/litek8s/server.env" ]

# 7. Join with a secret-only token is refused; with a K10 token it yields --server.
mkdir -p "$root/etc/litek8s"
printf 'LITEK8S_TOKEN=deadbeef\n' >"$root/etc/litek8s/server.env"
run FAKE_FLAGS="--cluster-init --server" LITEK8S_SERVER_URL=https://lk1:6443
check "join with secret-only token: exit 1" [ "$rc" = 1 ]
printf 'LITEK8S_TOKEN="K10aa::server:bb"\n' >"$root/etc/litek8s/server.env"
run FAKE_FLAGS="--cluster-init --server" LITEK8S_SERVER_URL=https://lk1:6443 LITEK8S_NODE_IP=10.1.1.1
check "join: exit 0" [ "$rc" = 0 ]
check "join: --server args" [ "$(args_of)" = "LITEK8S_CLUSTER_ARGS=--server https://lk1:6443 --node-ip 10.1.1.1" ]
check "join: token untouched" [ "$(token_of)" = '"K10aa::server:bb"' ]
run FAKE_FLAGS="--cluster-init --server" LITEK8S_SERVER_URL=lk1:6443
check "join: non-https URL refused" [ "$rc" = 1 ]
run FAKE_FLAGS="--cluster-init" LITEK8S_SERVER_URL=https://lk1:6443
check "join: build without --server refused" [ "$rc" = 1 ]

# 8. Ports: the holder is named; other ports and prefixes of the number do not count.
fresh ports
run FAKE_FLAGS="" FAKE_SS_OUT='LISTEN 0 4096 0.0.0.0:16443 0.0.0.0:* users:(("other",pid=9,fd=3))'
check "ports: :16443 is not :6443" [ "$rc" = 0 ]
run FAKE_FLAGS="" FAKE_SS_OUT='LISTEN 0 4096 *:6443 *:* users:(("k3s-server",pid=4242,fd=7))'
check "ports: 6443 taken -> exit 1" [ "$rc" = 1 ]
check "ports: names the process" [ "$(printf '%s\n' "$out" | tail -n 1)" = "litek8s-server-prestart: port 6443 is already in use by k3s-server (pid 4242); stop it or change the port" ]
run FAKE_FLAGS="" FAKE_SS_OUT='LISTEN 0 4096 [::1]:6444 [::]:*'
check "ports: 6444 taken by an unknown process" contains "$out" "port 6444 is already in use by an unknown process"
# The real ss on this machine, with a port we hold ourselves.
if command -v ss >/dev/null && command -v python3 >/dev/null; then
    python3 -c 'import socket,time,sys
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1",0)); s.listen()
print(s.getsockname()[1], flush=True); time.sleep(30)' >"$work/port" &
    holder=$!
    for _ in 1 2 3 4 5 6 7 8 9 10; do [ -s "$work/port" ] && break; sleep 0.2; done
    port=$(cat "$work/port")
    out=$(env LITEK8S_ROOT="$root" LITEK8S_BIN="$work/bin/litek8s" LITEK8S_IP="$work/bin/ip" \
        LITEK8S_API_PORT="$port" LITEK8S_RAFT_PORT=1 sh "$hook" 2>&1) && rc=0 || rc=$?
    kill "$holder" 2>/dev/null || true
    check "ports (real ss): exit 1" [ "$rc" = 1 ]
    check "ports (real ss): names python3 and its pid" contains "$out" "in use by python3 (pid $holder)"
fi

# --- litek8s-agent-prestart ---------------------------------------------------------------
agent_hook=$here/packaging/litek8s-agent-prestart
arun() {
    out=$(env LITEK8S_ROOT="$root" "$@" sh "$agent_hook" 2>&1) && rc=0 || rc=$?
}
agent_token() { sed -n 's/^LITEK8S_TOKEN=//p' "$root/etc/litek8s/agent.env"; }
agent_args() { cat "$root/run/litek8s-agent/args"; }
good=K10abcdef::server:s3cret-s3cret-s3cret

# 9. No server URL, or not https: one line naming the setting.
fresh agent
arun
check "agent: no LITEK8S_SERVER_URL -> exit 1" [ "$rc" = 1 ]
check "agent: ... says where to set it" contains "$out" "LITEK8S_SERVER_URL=https://HOST:6443"
arun LITEK8S_SERVER_URL=http://lk1:6443
check "agent: http:// refused" [ "$rc" = 1 ]

# 10. No token and no credential: refused, saying where the token goes; nothing written.
arun LITEK8S_SERVER_URL=https://lk1:6443
check "agent: no token -> exit 1" [ "$rc" = 1 ]
check "agent: ... one line" [ "$(printf '%s\n' "$out" | wc -l)" = 1 ]
check "agent: ... names agent.env" contains "$out" "etc/litek8s/agent.env"
check "agent: ... nothing written" [ ! -e "$root/etc/litek8s/agent.env" ]

# 11. LITEK8S_TOKEN_FILE: its token goes into agent.env (0600), the args name the server.
printf '%s\n' "$good" >"$root/join-token"
arun LITEK8S_SERVER_URL=https://lk1:6443 LITEK8S_TOKEN_FILE=/join-token
check "agent: token file -> exit 0" [ "$rc" = 0 ]
check "agent: token in agent.env" [ "$(agent_token)" = "$good" ]
check "agent: agent.env is 0600" [ "$(mode_of "$root/etc/litek8s/agent.env")" = 600 ]
check "agent: /etc/litek8s is 0700" [ "$(mode_of "$root/etc/litek8s")" = 700 ]
check "agent: args" [ "$(agent_args)" = "LITEK8S_AGENT_CLUSTER_ARGS=--server https://lk1:6443" ]
# The file may go away afterwards: agent.env keeps the token.
rm -f "$root/join-token"
arun LITEK8S_SERVER_URL=https://lk1:6443 LITEK8S_TOKEN_FILE=/join-token
check "agent: token file removed later -> exit 0" [ "$rc" = 0 ]
check "agent: ... token kept" [ "$(agent_token)" = "$good" ]

# 12. Bad tokens are refused, from the file or written by hand; a loose mode is tightened.
printf 'garbage\n' >"$root/join-token"
arun LITEK8S_SERVER_URL=https://lk1:6443 LITEK8S_TOKEN_FILE=/join-token
check "agent: a token file without a join token -> exit 1" [ "$rc" = 1 ]
check "agent: ... agent.env kept" [ "$(agent_token)" = "$good" ]
printf 'LITEK8S_TOKEN=secret-only\n' >"$root/etc/litek8s/agent.env"
arun LITEK8S_SERVER_URL=https://lk1:6443
check "agent: a secret-only token in agent.env -> exit 1" [ "$rc" = 1 ]
printf 'LITEK8S_TOKEN="%s"\n' "$good" >"$root/etc/litek8s/agent.env"
chmod 0644 "$root/etc/litek8s/agent.env"
arun LITEK8S_SERVER_URL=https://lk1:6443
check "agent: a hand-written quoted token -> exit 0" [ "$rc" = 0 ]
check "agent: ... mode tightened to 0600" [ "$(mode_of "$root/etc/litek8s/agent.env")" = 600 ]

# 13. A node that has joined needs no token.
fresh agent-joined
mkdir -p "$root/var/lib/litek8s/node-agent/credentials"
printf 'CERT\n' >"$root/var/lib/litek8s/node-agent/credentials/node.crt"
arun LITEK8S_SERVER_URL=https://lk1:6443
check "agent: joined node without a token -> exit 0" [ "$rc" = 0 ]

echo "packaging hooks: $passed passed, $failed failed"
[ "$failed" = 0 ]
