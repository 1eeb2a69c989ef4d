#!/usr/bin/env bash
# demo.sh — the controller on a local control plane, from nothing to
# reconciled objects, in about a minute (after the one-time tool build).
#
#   make demo                                   local etcd + kube-apiserver
#   make demo CLUSTER_KUBECONFIG=~/.kube/config your cluster (CRD and samples
#                                               go into its default namespace)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p out
kubectl=bin/kubectl
source hack/lib.sh

if [ -n "${CLUSTER_KUBECONFIG:-}" ]; then
	kubeconfig=$CLUSTER_KUBECONFIG
	say "Installing the CRD into the cluster of $kubeconfig"
	$kubectl --kubeconfig "$kubeconfig" apply -f config/crd/
	$kubectl --kubeconfig "$kubeconfig" wait --for condition=established --timeout 60s crd/myresources.example.com
else
	kubeconfig=out/kubeconfig
	say "Starting a local control plane (etcd + kube-apiserver on loopback)"
	start_controlplane "$kubeconfig" out/controlplane.log
fi
k() { $kubectl --kubeconfig "$kubeconfig" "$@"; }

say "Applying the samples (testdata/samples/myresources.yaml)"
k apply -f testdata/samples/myresources.yaml

say "Starting the controller (log: out/controller.log)"
bin/rawwatch --kubeconfig "$kubeconfig" --namespace default -v=2 > out/controller.log 2>&1 &
pids+=($!)
for _ in $(seq 1 60); do
	[ "$(k get myresource hello -o jsonpath='{.status.phase}' 2>/dev/null)" = Processed ] && break
	sleep 0.5
done
k get myresources

say "Editing one object: a new generation, reconciled again"
k patch myresource hello --type merge -p '{"spec":{"message":"edited by the demo"}}'
sleep 2
k get myresources -o custom-columns=NAME:.metadata.name,PHASE:.status.phase,GENERATION:.metadata.generation,OBSERVED:.status.observedGeneration,MESSAGE:.status.message

say "The failing one: status, conditions and Events (kubectl describe)"
k describe myresource broken | sed -n '/^Status:/,$p'

say "Deleting one object: the controller sees the deletion"
k delete myresource greeting
sleep 2
grep -h "MyResource deleted" out/controller.log || true

say "The CRD's schema rejects bad input (testdata/samples/invalid.yaml)"
k apply -f testdata/samples/invalid.yaml || true

say "Final state"
k get myresources
printf '\nController log: out/controller.log. Keep a control plane running with: make cluster\n'
