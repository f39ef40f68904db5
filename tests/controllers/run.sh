#!/usr/bin/env bash
# The controller and scheduler scenarios, driven with kubectl against the real server while
# tests/controllers/fake_kubelet.py plays the kubelet of three Node objects (n1, n2, n3).
#
# Usage: tests/controllers/run.sh KUBECTL [--ha] [SCENARIO ...]
#   --ha: a 3-server cluster (LITEK8S_RAFT_HEARTBEAT_MS=100), kubectl and the fake kubelet
#         talking to a follower; scenarios can kill the leader (`kill_leader`).
#   SCENARIO: names of files in tests/controllers/scenarios/ (default: all, in name order).
# Each scenario runs in its own namespace ($NS) and prints PASS/FAIL lines; the script ends
# with `N passed, N failed`. The Python virtualenv (.venv, made by tests/run-all.sh) runs the
# fake kubelet.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=../lib.sh
source "$ROOT/tests/lib.sh"
# shellcheck source=lib.sh
source "$HERE/lib.sh"

KUBECTL_BIN=${1:?usage: run.sh KUBECTL [--ha] [SCENARIO ...]}
shift
HA=0
if [ "${1:-}" = --ha ]; then
    HA=1
    shift
fi
controllers_env_start "$KUBECTL_BIN" "$HA"

scenarios=("$@")
if [ ${#scenarios[@]} -eq 0 ]; then
    for f in "$HERE"/scenarios/*.sh; do scenarios+=("$(basename "$f" .sh)"); done
fi
for s in "${scenarios[@]}"; do
    run_scenario "$s"
done
summary "$LABEL"
