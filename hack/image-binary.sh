#!/usr/bin/env bash
# image-binary.sh — build, without Docker, the binary the Dockerfile builds,
# and check it. The Dockerfile's `RUN ... go build ...` line is read from the
# Dockerfile and run here with the same build arguments (VERSION, TARGETOS,
# TARGETARCH) and an empty GOFLAGS, as in the image; only the output moves,
# from /out/ to $IMAGE_DIR (default bin/image/). Then the result is checked
# for what each flag is for: the build settings recorded in the binary say CGO_ENABLED=0 (a static
# binary, which distroless/static needs) and -trimpath; -s left no symbol
# table, -w no DWARF sections; -X main.version shows in --version. (Go does
# not record -ldflags in a -trimpath build, so their effects are checked.)
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "image-binary: $*" >&2; exit 1; }

lines=$(grep -cE '^RUN .*go build' Dockerfile || true)
[ "$lines" = 1 ] || die "want exactly one 'RUN ... go build' line in the Dockerfile, found $lines"
cmd=$(grep -E '^RUN .*go build' Dockerfile)
cmd=${cmd#RUN }
out=${IMAGE_DIR:-bin/image}
cmd=${cmd//\/out\//$out/}

builder=$(sed -nE 's/^FROM golang:([^ ]+) AS build$/\1/p' Dockerfile)
local_go=$(go env GOVERSION)
if [ "go$builder" != "$local_go" ]; then
	echo "image-binary: note: the Dockerfile builds with Go $builder, this machine has $local_go: same flags, another toolchain" >&2
fi

export VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
export TARGETOS=${TARGETOS:-$(go env GOOS)} TARGETARCH=${TARGETARCH:-$(go env GOARCH)}
export GOFLAGS=
mkdir -p "$out"
echo "image-binary: $cmd   (VERSION=$VERSION TARGETOS=$TARGETOS TARGETARCH=$TARGETARCH)"
eval "$cmd"

bin=$out/rawwatch
settings=$(go version -m "$bin")
for want in $'\tbuild\tCGO_ENABLED=0' $'\tbuild\t-trimpath=true'; do
	grep -qF -- "$want" <<<"$settings" || die "$bin lacks build setting ${want#$'\t'build$'\t'}; go version -m says:"$'\n'"$settings"
done
if go tool nm "$bin" >/dev/null 2>&1; then die "$bin still has a symbol table (-s missing)"; fi
if grep -qa -e '\.debug_info' -e '\.zdebug_info' "$bin"; then die "$bin still has DWARF sections (-w missing)"; fi
[ "$("$bin" --version)" = "rawwatch $VERSION" ] || die "$bin --version says '$("$bin" --version)', want 'rawwatch $VERSION'"
echo "image-binary: $bin ok: static (CGO_ENABLED=0), -trimpath, stripped, version $VERSION, $(du -h "$bin" | cut -f1)"
