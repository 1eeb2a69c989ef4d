#!/usr/bin/env bash
# image.sh — the controller's container image and the pod sandbox ("pause")
# image, built without a registry or a container engine, as tarballs that
# `ctr images import` reads (what the single-node cluster runs):
#
#   $IMAGE_DIR/rawwatch-$VERSION.tar   rawwatch:$VERSION, the binary `make image-binary`
#                                      builds by the Dockerfile's own go build line, laid
#                                      out as the Dockerfile's final stage says (hack/image)
#   $IMAGE_DIR/pause.tar               rawwatch-pause:1, a tiny static program
#   $IMAGE_DIR/fetch.tar               rawwatch-fetch:1, GET a URL with the pod's token
#                                      (the tests' scraper of /metrics)
#
# IMAGE_DIR is bin/image unless set (an absolute path).
set -euo pipefail
cd "$(dirname "$0")/.."
export VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
export IMAGE_DIR=${IMAGE_DIR:-$PWD/bin/image}
./hack/image-binary.sh
(cd hack/image && go build -o "$IMAGE_DIR/image-builder" . &&
	for p in pause fetch; do CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$IMAGE_DIR/$p" "./$p"; done)
"$IMAGE_DIR/image-builder" controller -dockerfile Dockerfile -binary "$IMAGE_DIR/rawwatch" -tag "rawwatch:$VERSION" -o "$IMAGE_DIR/rawwatch-$VERSION.tar"
"$IMAGE_DIR/image-builder" pause -binary "$IMAGE_DIR/pause" -tag rawwatch-pause:1 -o "$IMAGE_DIR/pause.tar"
"$IMAGE_DIR/image-builder" fetch -binary "$IMAGE_DIR/fetch" -tag rawwatch-fetch:1 -o "$IMAGE_DIR/fetch.tar"
