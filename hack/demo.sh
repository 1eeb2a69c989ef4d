#!/usr/bin/env bash
# demo.sh — the controller on a local control plane, from nothing to
# reconciled objects, narrated by --explain as it works (about a minute after
# the one-time tool build). The narration is the controller's stdout (in
# colour on a terminal); its klog log goes to out/controller.log.
#
#   make demo                                   local etcd + kube-apiserver
#   make demo CLUSTER_KUBECONFIG=~/.kube/config your cluster (CRD and samples
#                                               go into its default namespace)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p out
kubectl=bin/kubectl
source hack/lib.sh
settle() { sleep 1; } # let the narration of the last step print before the next heading

if [ -n "${CLUSTER_KUBECONFIG:-}" ]; then
	kubeconfig=$CLUSTER_KUBECONFIG
	say "Installing the CRD into the cluster of $kubeconfig"
	$kubectl --kubeconfig "$kubeconfig" apply -f config/crd/example.com_myresources.yaml
	$kubectl --kubeconfig "$kubeconfig" wait --for condition=established --timeout 60s crd/myresources.example.com
else
	kubeconfig=out/kubeconfig
	say "Starting a local control plane (etcd + kube-apiserver on loopback)"
	start_controlplane "$kubeconfig" out/controlplane.log
fi
k() { $kubectl --kubeconfig "$kubeconfig" "$@"; }
phase() { [ "$(k get myresource "$1" -o jsonpath='{.status.phase}')" = "$2" ]; }

say "Applying the samples (testdata/samples/myresources.yaml) before the controller starts"
k apply -f testdata/samples/myresources.yaml

say "Starting the controller with --explain (page size 2, so the LIST takes pages; watches end after 10-20 s)"
# --secure-serving=false: metrics and the live page as plain HTTP, on loopback
# only (in a cluster they are HTTPS, to callers RBAC allows).
bin/rawwatch --kubeconfig "$kubeconfig" --namespace default --explain --page-size 2 --min-watch-timeout 10s \
	--retry-base-delay 250ms --metrics-bind-address 127.0.0.1:0 --health-probe-bind-address 127.0.0.1:0 \
	--ui-bind-address "${UI_ADDR:-127.0.0.1:0}" --secure-serving=false --freshness-probe 10s -v=3 2> out/controller.log &
pids+=($!)
live_page out/controller.log
waitfor 60 phase hello Processed
settle
k get myresources

say "Editing one object: a MODIFIED event, a new generation, reconciled again"
k patch myresource hello --type merge -p '{"spec":{"message":"edited by the demo"}}'
waitfor 30 sh -c "[ \"\$($kubectl --kubeconfig $kubeconfig get myresource hello -o jsonpath='{.status.observedGeneration}')\" = 2 ]"
settle
k get myresources -o custom-columns=NAME:.metadata.name,PHASE:.status.phase,GENERATION:.metadata.generation,OBSERVED:.status.observedGeneration,MESSAGE:.status.message

say "The failing one (spec.message: fail) is retried with doubling delays; its status and Events"
k describe myresource broken | sed -n '/^Status:/,$p'

say "Deleting one object: a DELETED event carries its final state to the reconciler"
k delete myresource greeting
waitfor 30 grep -q "MyResource deleted" out/controller.log
settle

say "Waiting for the server to end the watch: a BOOKMARK first, then CLOSED and a RE-WATCH from the last resourceVersion"
waitfor 40 grep -q 'to="Watching" reason="watch ended' out/controller.log
settle

say "The CRD's schema rejects bad input (testdata/samples/invalid.yaml): the controller never sees it"
k apply -f testdata/samples/invalid.yaml || true

addr=$(sed -nE 's/.*"Serving metrics and probes[^"]*" address="([^"]+)".*/\1/p' out/controller.log | head -1)
if [ -n "$addr" ] && command -v curl >/dev/null; then
	say "Probes and metrics ($addr)"
	curl -s "$addr/readyz?verbose"
	curl -s "$addr/metrics" | grep -E '^(rawwatch_(lists|watch_restarts|watch_bookmarks|reconcile)_total|rawwatch_watch_events_total|workqueue_(adds|retries)_total|rawwatch_resource_version|rawwatch_watch_silence_seconds|rawwatch_freshness_probe_seconds_(sum|count)|rawwatch_watch_event_delivery_lag_seconds_(sum|count))' || true
fi

say "Final state"
k get myresources
printf '\nController log: out/controller.log. Keep a control plane running with: make cluster\n'
hold
