# rawwatch container image: a static binary on a distroless, non-root base.
# Build: docker build --build-arg VERSION=$(git describe --always) -t rawwatch .
# The build flags here are the ones `make image-binary` uses (checked in CI).

FROM golang:1.26.8 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/rawwatch .

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/rawwatch /rawwatch
USER 65532:65532
ENTRYPOINT ["/rawwatch"]
