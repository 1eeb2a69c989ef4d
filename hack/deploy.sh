#!/usr/bin/env bash
# deploy.sh — apply $CONFIG (default config/default: Namespace, CRD, RBAC,
# Deployment, metrics Service, PodDisruptionBudget; config/sharded: the same
# with three sharded replicas) to the cluster kubectl points at ($KUBECONFIG,
# or ~/.kube/config), by server-side apply, with the controller image $IMG.
#
#   IMG=registry.example/rawwatch:v1.0.0 hack/deploy.sh     (what `make deploy` runs)
#
# $COMPONENTS adds kustomize components, e.g. the freshness probe:
#   COMPONENTS=config/components/freshness-probe make deploy IMG=...
#
# The image and the components go in through a kustomize overlay written to
# out/deploy, so that config/ itself stays as committed. The CRD is applied
# first, and waited for: kubectl maps every object of one apply before it
# sends any, and a MyResource (the probe's object) cannot be mapped before
# its CRD is served. Extra kubectl arguments: $KUBECTL_ARGS
# (e.g. --force-conflicts after someone edited the objects by hand).
set -euo pipefail
cd "$(dirname "$0")/.."
img=${IMG:?set IMG to the image to deploy, e.g. IMG=registry.example/rawwatch:v1.0.0}
config=${CONFIG:-config/default}
config=${config%/}
[ -f "$config/kustomization.yaml" ] || { echo "deploy.sh: $config has no kustomization.yaml (config/default or config/sharded)" >&2; exit 2; }

# Split IMG into a name and a tag or digest; the colon of a registry's port
# (registry.example:5000/rawwatch) is not a tag.
name=$img tag="" digest=""
if [[ $img == *@* ]]; then
	name=${img%@*} digest=${img#*@}
elif [[ ${img##*/} == *:* ]]; then
	name=${img%:*} tag=${img##*:}
fi

mkdir -p out/deploy
{
	echo "# Written by hack/deploy.sh: $config with the image $img."
	echo "apiVersion: kustomize.config.k8s.io/v1beta1"
	echo "kind: Kustomization"
	echo "resources:"
	echo "- ../../$config"
	echo "images:"
	echo "- name: rawwatch"
	echo "  newName: $name"
	if [ -n "$digest" ]; then echo "  digest: $digest"; fi
	if [ -n "$tag" ]; then echo "  newTag: $tag"; fi
	if [ -n "${COMPONENTS:-}" ]; then
		echo "components:"
		for c in $COMPONENTS; do
			[ -f "${c%/}/kustomization.yaml" ] || { echo "deploy.sh: component $c has no kustomization.yaml" >&2; exit 2; }
			echo "- ../../${c%/}"
		done
	fi
} > out/deploy/kustomization.yaml

# shellcheck disable=SC2086 # KUBECTL_ARGS is a list of arguments
bin/kubectl apply --server-side --field-manager=rawwatch-deploy ${KUBECTL_ARGS:-} -k config/crd
bin/kubectl wait --for=condition=Established --timeout=60s crd/myresources.example.com

# shellcheck disable=SC2086 # KUBECTL_ARGS is a list of arguments
bin/kubectl apply --server-side --field-manager=rawwatch-deploy ${KUBECTL_ARGS:-} -k out/deploy
echo "deploy.sh: applied; watch the rollout with: bin/kubectl -n rawwatch-system rollout status deployment/rawwatch"
