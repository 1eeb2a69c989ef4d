# rawwatch container image: a static binary on a distroless, non-root base.
#
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) -t rawwatch:dev .
#
# No Docker engine is needed to check it: `make image-binary` (part of
# `make test`) runs this file's `go build` line outside Docker — the line is
# read from here, so the flags cannot drift — and checks the result is static,
# trimmed, stripped and versioned; test/e2e/dockerfile_test.go lints the structure.

# The official Go image, pinned to the toolchain the project is built with.
FROM golang:1.26.8 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# Set by BuildKit for each platform of a multi-platform build (docker buildx
# build --platform linux/amd64,linux/arm64); empty means the builder's own.
ARG TARGETOS TARGETARCH
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -buildvcs=false -ldflags "-s -w -X main.version=${VERSION}" -o /out/rawwatch .

# distroless/static: no shell, no package manager; CA certificates, tzdata and
# /etc/passwd only. Its nonroot variant is uid 65532, named again below so that
# the kubelet's runAsNonRoot check can verify it from the image.
FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/rawwatch /rawwatch
USER 65532:65532
ENTRYPOINT ["/rawwatch"]
