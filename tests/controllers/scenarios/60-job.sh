# Jobs: completions with parallelism (never more active pods than allowed, read from a watch),
# failure after the backoff limit with the 10 s delay between attempts, an Indexed Job,
# suspend and resume, the active deadline, a pod failure policy, TTL after finished; in a
# cluster, a 100-pod Indexed Job survives a SIGKILL of the leader with every index completed
# exactly once.
#
# Pods run on the fake kubelet's nodes (nodeName in the template); their annotations say how
# they end.

job() { # NAME NODE EXIT-CODE RUN-SECONDS SPEC-FIELDS(JSON members, may be empty)
    local extra=${5:+, $5}
    cat <<JSON
{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "$1"},
 "spec": {"template": {"metadata": {"annotations": {
    "test.litek8s.dev/exit-code": "$3", "test.litek8s.dev/run-seconds": "$4"}},
  "spec": {"nodeName": "$2", "restartPolicy": "Never",
   "containers": [{"name": "main", "image": "busybox"}]}}$extra}}
JSON
}
condition() { # JOB TYPE: "<status> <reason>" of the condition
    jq_of job "$1" -n "$NS" -- ".status.conditions[]? | select(.type==\"$2\") | \"\(.status) \(.reason)\""
}
events_of() { # NAME: the reasons of the events about NAME
    k get events -n "$NS" -o json | jq -r --arg n "$1" '[.items[] | select(.involvedObject.name==$n) | .reason] | unique | join(" ")'
}

# The pods of `pi` as a watch sees them, from before the Job exists.
"$KUBECTL_BIN" --kubeconfig "$KC" get pods -n "$NS" -l job-name=pi -w --output-watch-events \
    -o json >"$WORK/pi.watch" 2>/dev/null &
PI_WATCH=$!
sleep 1
{
    job pi n1 0 1 '"completions": 6, "parallelism": 2'
    job flaky n2 1 1 '"backoffLimit": 1'
    job idx n3 0 1 '"completions": 5, "parallelism": 3, "completionMode": "Indexed"'
    job paused n1 0 1 '"completions": 2, "parallelism": 2, "suspend": true'
    job slow n2 0 60 '"parallelism": 2, "activeDeadlineSeconds": 3'
    job pfp n3 42 1 '"podFailurePolicy": {"rules": [{"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}}]}'
    job short-lived n1 0 1 '"ttlSecondsAfterFinished": 2'
} | k apply -n "$NS" -f - >/dev/null

# Completions and parallelism.
wait_until "$T job: pi completes" 40 equals "True CompletionsReached" condition pi Complete
expect_grep "$T job: SuccessCriteriaMet came first, with the same reason" '^True CompletionsReached$' \
    "$(condition pi SuccessCriteriaMet)"
expect_grep "$T job: 6 succeeded, nothing active or uncounted, a completion time" '^6 0 \{\} true$' \
    "$(jq_of job pi -n "$NS" -- '"\(.status.succeeded) \(.status.active // 0) \(.status.uncountedTerminatedPods | tostring) \(.status.completionTime != null)"')"
expect_grep "$T job: exactly 6 pods ran, all Succeeded, none left holding the finalizer" '^6 6 0$' \
    "$(jq_of pods -n "$NS" -l job-name=pi -- '"\(.items | length) \([.items[] | select(.status.phase=="Succeeded")] | length) \([.items[] | select((.metadata.finalizers // []) | length > 0)] | length)"')"
kill "$PI_WATCH" 2>/dev/null
max_active=$(jq -s 'reduce .[] as $e ({m: {}, max: 0};
      .m[$e.object.metadata.name] = ($e.type != "DELETED"
        and $e.object.metadata.deletionTimestamp == null
        and (($e.object.status.phase // "Pending") | (. != "Succeeded" and . != "Failed")))
      | .max = ([.max, ([.m[] | select(.)] | length)] | max)) | .max' "$WORK/pi.watch")
expect_grep "$T job: at most 2 pods active at any time (watch)" '^2$' "$max_active"
uid=$(jq_of job pi -n "$NS" -- '.metadata.uid')
expect_grep "$T job: pods are named pi-*, labelled with the Job's uid and name, owned by it" \
    "^pi- $uid $uid pi pi Job true$" \
    "$(jq_of pods -n "$NS" -l job-name=pi -- '.items[0] | "\(.metadata.generateName) \(.metadata.labels["batch.kubernetes.io/controller-uid"]) \(.metadata.labels["controller-uid"]) \(.metadata.labels["batch.kubernetes.io/job-name"]) \(.metadata.labels["job-name"]) \(.metadata.ownerReferences[0].kind) \(.metadata.ownerReferences[0].controller)"')"
expect_grep "$T job: SuccessfulCreate and Completed events" 'Completed SuccessfulCreate' "$(events_of pi)"

# Failure after the backoff limit, with the delay between the attempts.
wait_until "$T job: flaky fails with BackoffLimitExceeded" 40 equals "True BackoffLimitExceeded" condition flaky Failed
expect_grep "$T job: 2 failed pods counted" '^2$' "$(jq_of job flaky -n "$NS" -- '.status.failed')"
gap=$(jq_of pods -n "$NS" -l job-name=flaky -- '[.items[]] | sort_by(.metadata.creationTimestamp) |
    ((.[1].metadata.creationTimestamp | fromdateiso8601) - (.[0].status.containerStatuses[0].state.terminated.finishedAt | fromdateiso8601))')
expect_grep "$T job: the second attempt started at least 10 s after the first failed (got ${gap}s)" '^(1[0-9]|[2-9][0-9])$' "$gap"
expect_grep "$T job: a BackoffLimitExceeded warning" '^Warning$' \
    "$(k get events -n "$NS" -o json | jq -r '.items[] | select(.involvedObject.name=="flaky" and .reason=="BackoffLimitExceeded") | .type')"

# Indexed.
wait_until "$T job: idx (Indexed) completes" 40 equals "True CompletionsReached" condition idx Complete
expect_grep "$T job: completedIndexes 0-4" '^0-4 5$' "$(jq_of job idx -n "$NS" -- '"\(.status.completedIndexes) \(.status.succeeded)"')"
expect_grep "$T job: one succeeded pod per index, with its hostname, label and variable" \
    '^0 1 2 3 4 ok$' \
    "$(jq_of pods -n "$NS" -l job-name=idx -- '[.items[] | select(.status.phase=="Succeeded")] |
        "\([.[].metadata.annotations["batch.kubernetes.io/job-completion-index"]] | sort | join(" ")) \(
          if all(.[]; .spec.hostname == "idx-\(.metadata.annotations["batch.kubernetes.io/job-completion-index"])"
                 and .metadata.labels["batch.kubernetes.io/job-completion-index"] == .metadata.annotations["batch.kubernetes.io/job-completion-index"]
                 and any(.spec.containers[0].env[]?; .name == "JOB_COMPLETION_INDEX")) then "ok" else "bad" end)"')"

# Suspend and resume.
wait_until "$T job: paused is Suspended" 20 equals "True JobSuspended" condition paused Suspended
expect_grep "$T job: a suspended Job has no pods and no start time" '^0 false$' \
    "$(k get pods -n "$NS" -l job-name=paused -o json | jq -r '.items | length') $(jq_of job paused -n "$NS" -- '.status.startTime != null')"
k patch job paused -n "$NS" --type=merge -p '{"spec": {"suspend": false}}' >/dev/null
wait_until "$T job: resumed, it completes" 30 equals "True CompletionsReached" condition paused Complete
expect_grep "$T job: Suspended is False (JobResumed), Suspended and Resumed events" \
    '^False JobResumed / Completed Resumed SuccessfulCreate Suspended$' "$(condition paused Suspended) / $(events_of paused)"

# The active deadline.
wait_until "$T job: slow fails with DeadlineExceeded" 20 equals "True DeadlineExceeded" condition slow Failed
wait_until "$T job: its pods were deleted and counted as failed" 20 equals "0 2" \
    bash -c "echo \"\$($KUBECTL_BIN --kubeconfig $KC get pods -n $NS -l job-name=slow -o json | jq '[.items[] | select(.status.phase != \"Failed\")] | length') \$($KUBECTL_BIN --kubeconfig $KC get job slow -n $NS -o json | jq '.status.failed')\""
expect_grep "$T job: a DeadlineExceeded warning" 'DeadlineExceeded' "$(events_of slow)"

# A pod failure policy.
wait_until "$T job: pfp fails by its FailJob rule" 30 equals "True PodFailurePolicy" condition pfp Failed
expect_grep "$T job: the message names the container and the exit code" \
    'Container main for pod .* failed with exit code 42 matching FailJob rule at index 0' \
    "$(jq_of job pfp -n "$NS" -- '.status.conditions[] | select(.type=="Failed") | .message')"

# TTL after finished: the Job goes, its pods are left to the garbage collector.
wait_until "$T job: short-lived is deleted after its TTL" 30 \
    bash -c "! $KUBECTL_BIN --kubeconfig $KC get job short-lived -n $NS >/dev/null 2>&1"

if [ "$HA" = 1 ]; then
    job big n1 0 1 '"completions": 100, "parallelism": 20, "completionMode": "Indexed"' |
        k apply -n "$NS" -f - >/dev/null
    wait_until "$T job: big is under way (30 indexes done)" 60 \
        bash -c "[ \"\$($KUBECTL_BIN --kubeconfig $KC get job big -n $NS -o json | jq '.status.succeeded // 0')\" -ge 30 ]"
    kill_leader
    pass "$T job: SIGKILLed the leader ($KILLED) in the middle of big"
    wait_until "$T job: big completes under the new leader" 120 equals "True CompletionsReached" condition big Complete
    expect_grep "$T job: completedIndexes 0-99, succeeded exactly 100" '^0-99 100$' \
        "$(jq_of job big -n "$NS" -- '"\(.status.completedIndexes) \(.status.succeeded)"')"
    expect_grep "$T job: no index has two succeeded pods (100 succeeded pods, 100 indexes)" '^100 100$' \
        "$(jq_of pods -n "$NS" -l job-name=big -- '[.items[] | select(.status.phase=="Succeeded") | .metadata.annotations["batch.kubernetes.io/job-completion-index"]] | "\(length) \(unique | length)"')"
fi
