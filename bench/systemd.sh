#!/bin/bash
# systemd benchmark: how long `systemctl start litek8s-server` takes to reach "active" (the
# server's READY=1) inside booted Debian 12 containers, and the unit's memory. Writes the table
# to bench/SYSTEMD.md (or $1), keeping the file's "## Notes" (bench/keep-notes.sh).
#
#   sudo bench/systemd.sh [OUT.md] [--debs DIR]     (ROUNDS=5, MUTATIONS=100000)
#
# Cases (packages installed as an administrator would, defaults file as shipped):
#   fresh     a first server on an empty state directory (prestart hook generates the token,
#             the server creates its CA and initializes a one-member cluster);
#   join      a third server joining a running 3-server cluster with an empty state
#             directory (it rejoins under its name each round), each container in its own
#             network namespace on a bridge;
#   restart   the fresh server after MUTATIONS ConfigMap creates: stop, start, READY once the
#             Raft log/snapshot is replayed.
# Time = systemd's own timestamps, InactiveExitTimestampMonotonic -> ActiveEnterTimestamp-
# Monotonic (ExecStartPre hook included). RSS: MemoryCurrent when the cgroup reports it, else
# VmRSS of the main process. Uses tests/systemd/lib.sh (cached rootfs, nspawn, netns).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
source "$repo/tests/systemd/lib.sh"

out=$repo/bench/SYSTEMD.md
debs=""
while (($#)); do
    case $1 in
    --debs) debs=$2; shift 2 ;;
    *) out=$1; shift ;;
    esac
done
ROUNDS=${ROUNDS:-5}
MUTATIONS=${MUTATIONS:-100000}
[ "$(id -u)" = 0 ] || die "needs root (nspawn)"
if [ -z "$debs" ]; then
    debs=${CARGO_TARGET_DIR:-$repo/target}/packages
    SKIP_LINTIAN=1 SKIP_RPM=1 "$repo/packaging/build-packages.sh" "$debs" >/dev/null
fi
deb_bin=$(ls "$debs"/litek8s_*.deb | head -n 1)
deb_srv=$(ls "$debs"/litek8s-server_*.deb | head -n 1)
trap 'cleanup_containers; net_down' EXIT INT TERM

install_pkgs() { # DIR PID
    mkdir -p "$1/root/pkgs"
    cp "$deb_bin" "$deb_srv" "$1/root/pkgs/"
    in_ct "$2" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        /root/pkgs/"$(basename "$deb_bin")" /root/pkgs/"$(basename "$deb_srv")" >/dev/null 2>&1
}

# Milliseconds from the last start request to active, by systemd's clock.
start_ms() { # PID
    local a b
    a=$(in_ct "$1" systemctl show -p InactiveExitTimestampMonotonic --value litek8s-server)
    b=$(in_ct "$1" systemctl show -p ActiveEnterTimestampMonotonic --value litek8s-server)
    echo $(( (b - a) / 1000 ))
}

rss_mib() { # PID
    local m mainpid
    m=$(in_ct "$1" systemctl show -p MemoryCurrent --value litek8s-server)
    if [[ "$m" =~ ^[0-9]+$ ]]; then
        awk -v b="$m" 'BEGIN { printf "%.1f (MemoryCurrent)", b / 1048576 }'
        return
    fi
    mainpid=$(in_ct "$1" systemctl show -p MainPID --value litek8s-server)
    in_ct "$1" awk '/^VmRSS/ { printf "%.1f (VmRSS)", $2 / 1024 }' "/proc/$mainpid/status"
}

# median of the numbers on stdin
median() { sort -n | awk '{ a[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else print int((a[NR / 2] + a[NR / 2 + 1]) / 2) }'; }
minmax() { sort -n | awk 'NR == 1 { lo = $1 } { hi = $1 } END { print lo "–" hi }'; }

wipe_state() { # PID: an empty state directory and no generated files (a fresh machine)
    in_ct "$1" systemctl stop litek8s-server
    in_ct "$1" sh -c 'rm -rf /var/lib/litek8s/apiserver/* /etc/litek8s/server.env /etc/litek8s/kubeconfig.yaml'
}

# MUTATIONS ConfigMap creates through the server of container PID (DIR is its root), from
# the host inside the container's network namespace: 16 keep-alive HTTPS connections.
write_mutations() { # PID DIR
    local data=$2/var/lib/litek8s/apiserver
    nsenter -t "$1" -n python3 - "$MUTATIONS" "$data/admin-token" "$data/ca.crt" <<'PY'
import http.client, json, ssl, sys, threading
total, token_path, ca = int(sys.argv[1]), sys.argv[2], sys.argv[3]
token = open(token_path).read().strip()
ctx = ssl.create_default_context(cafile=ca)
threads, failures = 16, []
def work(t):
    conn = http.client.HTTPSConnection("127.0.0.1", 6443, context=ctx, timeout=30)
    for i in range(t, total, threads):
        body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": f"bench-{i}"}, "data": {"k": "v"}})
        for attempt in range(5):
            try:
                conn.request("POST", "/api/v1/namespaces/default/configmaps", body,
                             {"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
                r = conn.getresponse(); r.read()
                if r.status in (201, 409):
                    break
            except Exception:
                conn = http.client.HTTPSConnection("127.0.0.1", 6443, context=ctx, timeout=30)
        else:
            failures.append(i)
ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
[t.start() for t in ts]; [t.join() for t in ts]
if failures:
    sys.exit(f"{len(failures)} writes failed")
PY
}

rows=()
row() { rows+=("| $1 | $2 | $3 | $4 |"); echo "| $1 | $2 | $3 | $4 |"; }

# --- fresh first server, then restart with MUTATIONS
log "== fresh server (${ROUNDS} rounds)"
dir=$(copy_rootfs lkb-single)
boot lkb-single "$dir" --private-network
pid=$BOOT_PID
install_pkgs "$dir" "$pid"
in_ct "$pid" systemctl enable litek8s-server >/dev/null 2>&1
times=()
for r in $(seq 1 "$ROUNDS"); do
    [ "$r" = 1 ] || wipe_state "$pid"
    in_ct "$pid" timeout 110 systemctl start litek8s-server
    times+=("$(start_ms "$pid")")
done
sleep 2
rss=$(rss_mib "$pid")
row "fresh first server (cluster-init), empty state" \
    "$(printf '%s\n' "${times[@]}" | median)" "$(printf '%s\n' "${times[@]}" | minmax)" "$rss"

log "== writing $MUTATIONS mutations"
t0=$(date +%s)
write_mutations "$pid" "$dir"
log "wrote $MUTATIONS in $(( $(date +%s) - t0 )) s"
rss_loaded=$(rss_mib "$pid")
times=()
for r in $(seq 1 "$ROUNDS"); do
    in_ct "$pid" timeout 70 systemctl stop litek8s-server
    in_ct "$pid" timeout 110 systemctl start litek8s-server
    times+=("$(start_ms "$pid")")
done
sleep 2
row "restart with $MUTATIONS mutations to replay" \
    "$(printf '%s\n' "${times[@]}" | median)" "$(printf '%s\n' "${times[@]}" | minmax)" \
    "$(rss_mib "$pid") (before restart: $rss_loaded)"
cleanup_containers

# --- a server joining a 3-server cluster
log "== join (${ROUNDS} rounds)"
net_up
declare -a dirs pids
for n in 1 2 3; do
    dirs[n]=$(copy_rootfs "lkb$n")
    boot "lkb$n" "${dirs[n]}" "--network-namespace-path=/run/netns/$NET_NS-$n"
    pids[n]=$BOOT_PID
    install_pkgs "${dirs[n]}" "${pids[n]}"
done
in_ct "${pids[1]}" timeout 110 systemctl enable --now litek8s-server >/dev/null 2>&1
token=$(cat "${dirs[1]}/var/lib/litek8s/apiserver/join-token")
for n in 2 3; do
    in_ct "${pids[n]}" sh -c "echo 'LITEK8S_SERVER_URL=https://$NET_PREFIX.1:6443' >> /etc/default/litek8s-server
        install -d -m 0700 /etc/litek8s; install -m 0600 /dev/null /etc/litek8s/server.env
        echo 'LITEK8S_TOKEN=$token' > /etc/litek8s/server.env"
    in_ct "${pids[n]}" systemctl enable litek8s-server >/dev/null 2>&1
done
in_ct "${pids[2]}" timeout 110 systemctl start litek8s-server
times=()
for r in $(seq 1 "$ROUNDS"); do
    if [ "$r" != 1 ]; then
        in_ct "${pids[3]}" systemctl stop litek8s-server
        in_ct "${pids[3]}" sh -c 'rm -rf /var/lib/litek8s/apiserver/* /etc/litek8s/kubeconfig.yaml'
    fi
    in_ct "${pids[3]}" timeout 110 systemctl start litek8s-server
    times+=("$(start_ms "${pids[3]}")")
done
sleep 2
row "third server joining a running cluster, empty state" \
    "$(printf '%s\n' "${times[@]}" | median)" "$(printf '%s\n' "${times[@]}" | minmax)" "$(rss_mib "${pids[3]}")"
cleanup_containers
net_down

{
    echo "# systemd: start to READY"
    echo
    echo "\`bench/systemd.sh\` on $(nproc) cores, $(date -u +%Y-%m-%d): Debian 12 containers booted with"
    echo "systemd-nspawn, packages from \`$(basename "$deb_bin")\`, $ROUNDS rounds per case. Time is"
    echo "systemd's InactiveExit → ActiveEnter (the \`systemctl start\` request to READY=1, the"
    echo "ExecStartPre hook included). Targets: fresh server < 1000 ms, restart with"
    echo "100,000 mutations < 2000 ms. Load average during the run: $(cut -d' ' -f1-3 /proc/loadavg)."
    echo
    echo "| case | median ms | range ms | RSS MiB |"
    echo "|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
    [ -z "${BENCH_NOTE:-}" ] || { echo; echo "$BENCH_NOTE"; }
} >"$out.new"
"$repo/bench/keep-notes.sh" "$out.new" "$out"
rm -f "$out.new"
echo "wrote $out"
