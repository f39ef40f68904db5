#!/usr/bin/env bash
# Resident memory of a 1-member cluster at start, after a burst of 8,000 ConfigMap creates
# (16 connections; CREATES_PER_CONN, default 500, sets the burst) and after 10 s idle: how much
# freed memory the allocator gives back.
#   bench/experiments/idle-rss.sh BINARY [ENV=VALUE...]
# e.g. with a build that reads LK_PURGE_DELAY (git show e2f9cc2:bench/experiments/purge-delay.patch):
#   bench/experiments/idle-rss.sh target/release/litek8s LK_PURGE_DELAY=10
set -euo pipefail
bin=$1
shift
dir=$(mktemp -d /tmp/litek8s-idle-rss.XXXXXX)
port=17643
env "$@" "$bin" apiserver --data-dir "$dir" --listen 127.0.0.1:$port --cluster-init \
    --log-level warn >"$dir.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir" "$dir.log"' EXIT
for _ in $(seq 1 200); do
    curl -s http://127.0.0.1:$port/readyz | grep -q ok && break
    sleep 0.1
done
rss() { awk '/^VmRSS/{print $2}' /proc/$pid/status; }
echo "at start: $(rss) kB"
python3 - "$dir" $port "${CREATES_PER_CONN:-500}" <<'PY'
import http.client, json, ssl, sys, threading
data_dir, port, per_conn = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
token = open(f"{data_dir}/admin-token").read().strip()
ctx = ssl.create_default_context(cafile=f"{data_dir}/ca.crt")
def worker(w):
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx)
    for i in range(per_conn):
        body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": f"c{w}-{i}"}, "data": {"k": "x" * 1000}})
        conn.request("POST", "/api/v1/namespaces/default/configmaps", body,
                     {"Authorization": "Bearer " + token, "Content-Type": "application/json"})
        reply = conn.getresponse()
        reply.read()
        if reply.status != 201:
            sys.exit(f"create answered {reply.status}")
threads = [threading.Thread(target=worker, args=(w,)) for w in range(16)]
for t in threads: t.start()
for t in threads: t.join()
PY
echo "after the burst: $(rss) kB"
sleep 10
echo "after 10 s idle: $(rss) kB (anonymous $(awk '/^RssAnon/{print $2}' /proc/$pid/status) kB)"
