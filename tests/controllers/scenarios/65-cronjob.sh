# CronJobs: schedules that do not parse and unknown time zones are refused with 422 as
# kube-apiserver refuses them; `kubectl create job --from=cronjob/...` runs a Job at once; an
# every-minute CronJob fires at the next minute (the one wait of up to a minute in these
# scenarios) with a Job named after its scheduled minute, a zoned one writes its scheduled
# time in its zone, a suspended one does not fire, and the finished Job becomes the last
# success.

cronjob() { # NAME SCHEDULE NODE SPEC-FIELDS(JSON members, may be empty)
    local extra=${4:+, $4}
    cat <<JSON
{"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "$1"},
 "spec": {"schedule": "$2", "jobTemplate": {"metadata": {"labels": {"made-by": "$1"}}, "spec": {"template": {
   "metadata": {"annotations": {"test.litek8s.dev/exit-code": "0", "test.litek8s.dev/run-seconds": "1"}},
   "spec": {"nodeName": "$3", "restartPolicy": "Never",
    "containers": [{"name": "main", "image": "busybox"}]}}}}$extra}}
JSON
}

# Created first: they fire at the next minute while the checks below run.
{
    cronjob minutely '*/1 * * * *' n2 '"concurrencyPolicy": "Forbid"'
    cronjob zoned '* * * * *' n3 '"timeZone": "Asia/Kolkata"'
    cronjob sleepy '* * * * *' n1 '"suspend": true'
} | k apply -n "$NS" -f - >/dev/null
expect_grep "$T cronjob: three CronJobs created" '^minutely sleepy zoned$' \
    "$(jq_of cronjobs -n "$NS" -- '[.items[].metadata.name] | sort | join(" ")')"

# Refused at create, with kube-apiserver's messages.
refused() { # NAME SCHEDULE EXTRA: the create's verbose output
    cronjob "$1" "$2" n1 "$3" | k create -n "$NS" -f - -v=6
}
out=$(refused bad-range '61 * * * *' '')
expect_grep "$T cronjob: a minute of 61 is refused with 422" '422 Unprocessable Entity' "$out"
expect_grep "$T cronjob: ... saying robfig/cron's reason" \
    'spec.schedule: Invalid value: "61 \* \* \* \*": end of range \(61\) above maximum \(59\): 61' "$out"
out=$(refused bad-words 'not a schedule' '')
expect_grep "$T cronjob: words are refused with 422" '422 Unprocessable Entity' "$out"
expect_grep "$T cronjob: ... with the field count message" \
    'expected exactly 5 fields, found 3: \[not a schedule\]' "$out"
out=$(refused bad-zone '* * * * *' '"timeZone": "Mars/Olympus"')
expect_grep "$T cronjob: an unknown time zone is refused (422)" \
    'spec.timeZone: Invalid value: "Mars/Olympus": unknown time zone Mars/Olympus' "$out"
out=$(refused bad-tz 'TZ=UTC * * * * *' '')
expect_grep "$T cronjob: a TZ= prefix is refused, pointing at timeZone" \
    'cannot use TZ or CRON_TZ in schedule, use timeZone field instead' "$out"
expect_grep "$T cronjob: nothing refused was stored" '^3$' \
    "$(jq_of cronjobs -n "$NS" -- '.items | length')"

# A Job made by hand from the CronJob's template.
k create job manual -n "$NS" --from=cronjob/minutely >/dev/null
expect_grep "$T cronjob: create job --from=cronjob makes a Job owned by the CronJob" \
    '^manual CronJob minutely minutely$' \
    "$(jq_of job manual -n "$NS" -- '"\(.metadata.annotations["cronjob.kubernetes.io/instantiate"]) \(.metadata.ownerReferences[0].kind) \(.metadata.ownerReferences[0].name) \(.metadata.labels["made-by"])"')"
wait_until "$T cronjob: ... which runs to completion" 30 equals "True" \
    jq_of job manual -n "$NS" -- '.status.conditions[]? | select(.type=="Complete") | .status'

# The schedule fires.
wait_until "$T cronjob: minutely fires at the next minute" 75 bash -c \
    "[ -n \"\$($KUBECTL_BIN --kubeconfig $KC get cronjob minutely -n $NS -o jsonpath='{.status.lastScheduleTime}')\" ]"
last=$(jq_of cronjob minutely -n "$NS" -- '.status.lastScheduleTime')
name="minutely-$(($(date -d "$last" +%s) / 60))"
expect_grep "$T cronjob: its Job is named after the scheduled minute ($name), annotated with it" \
    "^$last minutely$" \
    "$(jq_of job "$name" -n "$NS" -- '"\(.metadata.annotations["batch.kubernetes.io/cronjob-scheduled-timestamp"]) \(.metadata.labels["made-by"])"')"
expect_grep "$T cronjob: a SuccessfulCreate event names it" "Created job $name" \
    "$(k get events -n "$NS" -o json | jq -r '.items[] | select(.involvedObject.name=="minutely") | .message')"
wait_until "$T cronjob: the finished Job leaves status.active and is the last success" 30 equals "0 true" \
    jq_of cronjob minutely -n "$NS" -- '"\(.status.active // [] | length) \(.status.lastSuccessfulTime != null)"'
wait_until "$T cronjob: the zoned CronJob's Job carries its time in Asia/Kolkata" 20 bash -c \
    "$KUBECTL_BIN --kubeconfig $KC get jobs -n $NS -l made-by=zoned -o json | jq -e '[.items[].metadata.annotations[\"batch.kubernetes.io/cronjob-scheduled-timestamp\"] | select(endswith(\":00+05:30\"))] | length > 0'"
expect_grep "$T cronjob: the suspended one made no Job" '^0$' \
    "$(jq_of jobs -n "$NS" -l made-by=sleepy -- '.items | length')"
