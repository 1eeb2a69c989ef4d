#!/usr/bin/env bash
# image.sh — the controller's container image and the pod sandbox ("pause")
# image, built without a registry or a container engine, as tarballs that
# `ctr images import` reads (what the single-node cluster runs):
#
#   bin/image/rawwatch-$VERSION.tar   rawwatch:$VERSION, the binary `make image-binary`
#                                     builds by the Dockerfile's own go build line, laid
#                                     out as the Dockerfile's final stage says (hack/image)
#   bin/image/pause.tar               rawwatch-pause:1, a tiny static program
set -euo pipefail
cd "$(dirname "$0")/.."
export VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
./hack/image-binary.sh
mkdir -p bin/image
(cd hack/image && go build -o ../../bin/image/image-builder . && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o ../../bin/image/pause ./pause)
bin/image/image-builder controller -dockerfile Dockerfile -binary bin/image/rawwatch -tag "rawwatch:$VERSION" -o "bin/image/rawwatch-$VERSION.tar"
bin/image/image-builder pause -binary bin/image/pause -tag rawwatch-pause:1 -o bin/image/pause.tar
