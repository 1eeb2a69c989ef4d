#!/usr/bin/env bash
# verify-manifests.sh — regenerate the DeepCopy code and the CRD and fail if
# that changed anything: the committed files must be what the Go types say.
set -euo pipefail
cd "$(dirname "$0")/.."
generated=(api/v1alpha1/zz_generated.deepcopy.go config/crd/example.com_myresources.yaml)
before=$(cat "${generated[@]}" | sha256sum)
make --no-print-directory manifests >/dev/null
after=$(cat "${generated[@]}" | sha256sum)
if [ "$before" != "$after" ]; then
	echo "verify-manifests: generated files were out of date with api/v1alpha1; they are regenerated now:" >&2
	git --no-pager diff --stat -- "${generated[@]}" >&2 || true
	echo "verify-manifests: review and commit them." >&2
	exit 1
fi
echo "verify-manifests: generated files are up to date"
