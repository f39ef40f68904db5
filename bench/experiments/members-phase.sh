# Sourced by the experiment scripts that watch the members of a 3-member cluster during
# ha_bench's create phase (64 connections): profile.sh, alloc-stat.sh, rss-growth.sh.
#   start_members_phase BINARY [ENV=VALUE...]
# Starts ha_bench in the background and returns once the cluster's three members run. Sets
# `bench` (ha_bench's pid) and `out` (its result file); `finish_members_phase` waits for it,
# prints the 3-member result rows and removes the file. Needs target/release/ha_bench.

start_members_phase() {
    local bin=$1
    shift
    out=$(mktemp /tmp/litek8s-members-phase.XXXXXX.md)
    env "$@" LITEK8S_BIN="$bin" HA_MEMBERS=3 HA_CONNS=64 HA_READS=0 HA_KILLS=0 HA_TERMS=0 \
        HA_SIDE_ROUNDS=0 timeout 300 "$ROOT/target/release/ha_bench" "$out" >/dev/null 2>&1 &
    bench=$!
    for _ in $(seq 1 100); do
        [ "$(pgrep -f "^$bin apiserver" | wc -l)" -ge 3 ] && break
        sleep 0.1
    done
}

finish_members_phase() {
    wait "$bench" || true
    grep -E '^\| 3 \|' "$out"
    rm -f "$out"
}
