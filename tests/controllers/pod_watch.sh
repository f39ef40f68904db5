# Pod watchers for the workload scenarios (sourced by a scenario after lib.sh): each runs
# tests/controllers/pod_watch.py in the background and appends one JSON line per change of
# the watched pods to $WORK/watch-NAME.jsonl, so a scenario checks bounds at every step.
#
#   start_pod_watch NAME SELECTOR     start watching $NS pods matching SELECTOR
#   watch_mark NAME                   the number of lines so far (a step starts after it)
#   watch_until NAME SECONDS FILTER   wait until the last line satisfies the jq FILTER
#   watch_range NAME FROM FILTER      jq FILTER over the lines after FROM, slurped
#   stop_pod_watches                  stop every watcher this scenario started

POD_WATCH_PIDS=()

start_pod_watch() {
    local name=$1 selector=$2 file="$WORK/watch-$1.jsonl" i
    : >"$file"
    "$ROOT/.venv/bin/python" "$ROOT/tests/controllers/pod_watch.py" --kubeconfig "$KC" \
        --namespace "$NS" --selector "$selector" --out "$file" >>"$WORK/watch-$name.log" 2>&1 </dev/null &
    POD_WATCH_PIDS+=($!)
    for ((i = 0; i < 100; i++)); do
        [ -s "$file" ] && return 0
        sleep 0.1
    done
    fail "$T pod watch $name started"
}

stop_pod_watches() {
    local pid
    for pid in "${POD_WATCH_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    POD_WATCH_PIDS=()
}

watch_mark() { wc -l <"$WORK/watch-$1.jsonl"; }

watch_last_is() { tail -n 1 "$WORK/watch-$1.jsonl" | jq -e "$2" >/dev/null 2>&1; }

watch_until() {
    local name=$1 limit=$2 filter=$3 i
    for ((i = 0; i < limit * 10; i++)); do
        watch_last_is "$name" "$filter" && return 0
        sleep 0.1
    done
    return 1
}

watch_range() {
    tail -n +"$(($2 + 1))" "$WORK/watch-$1.jsonl" | jq -s "$3"
}

# check_bounds LABEL NAME FROM MAX_ACTIVE MIN_AVAILABLE: the pods seen after line FROM were
# never more than MAX_ACTIVE active nor fewer than MIN_AVAILABLE available.
check_bounds() {
    local label=$1 name=$2 from=$3 max=$4 min=$5 seen
    seen=$(watch_range "$name" "$from" '"\(length) steps, active \(map(.active) | max)..\(map(.active) | min), available \(map(.available) | min)..\(map(.available) | max)"')
    if [ "$(watch_range "$name" "$from" "(map(.active) | max) <= $max and (map(.available) | min) >= $min and length > 0")" = true ]; then
        pass "$label (at most $max pods, at least $min available: $seen)"
    else
        fail "$label (at most $max pods, at least $min available: $seen)"
    fi
}

# active_pods SELECTOR: the number of $NS pods matching SELECTOR that are not being deleted.
active_pods() {
    jq_of pods -n "$NS" -l "$1" -- '[.items[] | select(.metadata.deletionTimestamp == null)] | length'
}
