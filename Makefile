# rawwatch — `make demo` shows it working, `make test` proves it, `make help`
# lists every target; plain `make` only builds (the default goal is all: build).
# Everything needed is built on first use: the local control plane
# (kube-apiserver, etcd) and kubectl from the Go module proxy into bin/
# (about 5 minutes once; cached in the user cache dir afterwards).

SHELL := /bin/bash
GO    ?= go
TOOLS := ./hack/ensure-tools.sh

.PHONY: all help build browser test unit vet manifests verify-manifests tools demo demo-410 demo-drop demo-refuse demo-garbage demo-storm demo-faults demo-flap-cut demo-flap-error demo-freeze demo-watchlist-end demo-watch-410 demo-too-large-rv demo-429 demo-500 demo-garble demo-apiserver-restart demo-etcd-restore demo-slow-consumer demo-initial-flap-cut cluster node node-tools image run chaos clean bench bench-storm bench-converge image-binary deploy undeploy mutants scorecard

# The version stamped into binaries and the image tag `make deploy` uses.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
IMG     ?= rawwatch:$(VERSION)
# What `make deploy` applies: config/default, or config/sharded; and
# components added to it (config/components/freshness-probe).
CONFIG  ?= config/default
COMPONENTS ?=

all: build ## the default goal (plain `make`): build

help: ## this list, from each target's own comment
	@awk 'BEGIN { FS = ":.*## " } /^[a-z][a-z0-9 -]*:.*## / { gsub(/\$$\$$/, "$$", $$2); \
		if (length($$1) > 18) printf "  %s\n  %-18s %s\n", $$1, "", $$2; else printf "  %-18s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

build: ## the controller binary, bin/rawwatch
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o bin/rawwatch .

image-binary: ## the binary the Dockerfile builds, built here by its own go build line, and checked
	VERSION=$(VERSION) ./hack/image-binary.sh

tools: ## etcd, kube-apiserver, kubectl and controller-gen into bin/
	$(TOOLS) etcd kube-apiserver kubectl controller-gen

node-tools: tools ## as root, the single-node cluster's programs: kubelet, kube-controller-manager, kube-scheduler, kube-proxy into bin/ (cached like kube-apiserver), Debian's containerd, runc, CNI plugins, iptables, conntrack
	@if [ "$$(id -u)" = 0 ]; then set -x; $(TOOLS) kubelet kube-controller-manager kube-scheduler kube-proxy && ./hack/ensure-node.sh; \
	else echo "node-tools: not root: no single-node cluster here (test/node skips its tests on it)"; fi

image: ## the controller's image (rawwatch:$(VERSION)) and the pod sandbox's, built without a registry into bin/image/*.tar
	VERSION=$(VERSION) ./hack/image.sh

manifests: ## regenerate DeepCopy code and the CRD from api/v1alpha1
	$(TOOLS) controller-gen
	bin/controller-gen object paths=./api/...
	bin/controller-gen crd paths=./api/... output:crd:artifacts:config=config/crd

verify-manifests: ## fail if the generated files differ from what the Go types say
	./hack/verify-manifests.sh

mutants: ## mutation test: each planted bug of internal/mutants/catalogue.txt must fail the explorer or the other -short tests; MUTANTS_ARGS="-run ID -j 2", or "-check" (docs/testing.md)
	$(GO) run ./cmd/mutants $(MUTANTS_ARGS)

vet: ## go vet ./...
	$(GO) vet ./...

browser: ## Debian's chromium for the live page's browser test, when missing and this user may install it
	./hack/ensure-chromium.sh

test: tools node-tools browser verify-manifests vet image-binary ## everything CI runs (test/node on a real single-node cluster when root)
	$(GO) test -race -timeout 30m ./...

unit: ## every test that needs no control plane: go test -race -short ./... (under a minute once built)
	$(GO) test -race -short ./...

demo: tools build ## local control plane + CRD + samples + controller, then kubectl get
	./hack/demo.sh

demo-410 demo-drop demo-refuse demo-garbage demo-storm: tools build ## one fault on purpose, narrated (hack/fault-demo.sh)
	./hack/fault-demo.sh $(@:demo-%=%)

demo-flap-cut demo-flap-error demo-freeze demo-watchlist-end demo-watch-410 demo-too-large-rv demo-429 demo-500 demo-garble demo-apiserver-restart demo-etcd-restore demo-slow-consumer demo-initial-flap-cut: tools build ## each fault of the scorecard on purpose, narrated (--explain): demo-flap-cut, demo-garble, demo-etcd-restore, demo-slow-consumer, ...
	./hack/fault-demo.sh $(@:demo-%=%)

demo-faults: tools build ## every fault demo, one after the other
	./hack/fault-demo.sh all

cluster: tools ## keep a local control plane running (kubeconfig: out/kubeconfig)
	$(GO) run ./cmd/controlplane --kubeconfig out/kubeconfig

node: node-tools image ## keep a real single-node cluster running (root): kubelet on containerd in a network namespace of its own, the images imported; it prints how to make deploy on it
	$(GO) build -o bin/node ./cmd/node
	bin/node

# How long each fault of the scorecard lasts (but freeze, which outlasts the
# watchdog), and anything else for it (SCORECARD_ARGS="--faults flap-cut,refuse
# --clients raw,informer": a part, which leaves docs/ alone).
SCORECARD_DURATION ?= 20s
SCORECARD_ARGS     ?=

scorecard: tools ## the fault scorecard: every named fault against each client (raw, raw-watchlist, informer, ...), SCORECARD_DURATION (20s) each (freeze past the watchdog), a fault's clients side by side; out/scorecard, and docs/scorecard.md from the run (its time is on the page)
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o bin/scorecard ./cmd/scorecard
	bin/scorecard --duration $(SCORECARD_DURATION) --out out/scorecard $(SCORECARD_ARGS)
	$(if $(SCORECARD_ARGS),,bin/scorecard --from out/scorecard/scorecard.json --out docs)

chaos: tools ## the full chaos run (10,000 objects, 3 min of churn under faults); CHAOS_ARGS="--objects 1000 --duration 60s" for the short one
	$(GO) run ./cmd/chaos $(CHAOS_ARGS)

run: build ## the controller against your cluster: make run ARGS="--kubeconfig ~/.kube/config"
	bin/rawwatch $(ARGS)

deploy: ## apply $(CONFIG) (config/default; config/sharded: 3 sharded replicas) and $(COMPONENTS) to the cluster of $$KUBECONFIG (server-side) with image $(IMG)
	$(TOOLS) kubectl
	IMG=$(IMG) CONFIG=$(CONFIG) COMPONENTS="$(COMPONENTS)" ./hack/deploy.sh

undeploy: ## delete what deploy applied (the CRD too, and with it every MyResource)
	$(TOOLS) kubectl
	bin/kubectl delete --ignore-not-found -k $(CONFIG)

clean: ## remove bin/ and out/ (the tool cache in the user cache dir stays)
	rm -rf bin out

# Objects in each run of the heap-per-object sweep (compare sizes) that make
# bench runs: 2,000 keeps it near a minute; the docs' figures are at 10,000.
SIZES_OBJECTS ?= 2000

bench: tools ## the comparison harness (default scenario, the apiserver's cost per consumer), heap per object against payload, convergence of 1,000 creates at the default flags, and the delivery benchmarks: reports in out/compare, and docs/benchmarks.md's tables rendered from them (the storm's, from make bench-storm's out/storm/payload-2k)
	$(GO) build -o bin/compare ./cmd/compare
	bin/compare --out out/compare
	bin/compare sizes --objects $(SIZES_OBJECTS) --out out/compare/sizes
	bin/compare converge --objects 1000 --runs 1 --settings defaults,200/400/2/none --out out/compare/converge
	$(GO) test -run '^$$' -bench 'Delivery$$' -count 3 -benchtime 4x ./compare | tee out/compare/delivery.txt
	$(GO) test -run '^$$' -bench 'DeliveryLatency$$' -count 3 -benchtime 2x ./compare | tee out/compare/latency.txt
	KUBE_FEATURE_ClientsAllowCBOR=true $(GO) test -run '^$$' -bench 'DeliveryWire$$' -count 3 -benchtime 4x ./compare | tee out/compare/wire.txt
	$(GO) run ./hack/benchdoc --from out
	@echo "reports: out/compare; tables: docs/benchmarks.md"

# The relist storm's clients per payload. 50 informers of 10,000 16 KiB
# objects are about 8 GB of cache in one process, twice that while they
# relist, beside an apiserver sending 50 lists of 160 MiB: more than a 24 GiB
# machine holds, so the 16 KiB storm runs 10 clients unless told otherwise.
STORM_CLIENTS     ?= 50
STORM_CLIENTS_16K ?= 10

bench-storm: tools ## relist storm: STORM_CLIENTS (50) clients of each kind relist 10,000 objects at once after an apiserver restart, payloads 0, 2 and 16 KiB (16 KiB with STORM_CLIENTS_16K = 10), into out/storm, and docs/benchmarks.md's storm table (payload-2k)
	$(GO) build -o bin/compare ./cmd/compare
	bin/compare storm --clients $(STORM_CLIENTS) --payload 0 --out out/storm/payload-0
	bin/compare storm --clients $(STORM_CLIENTS) --payload 2048 --out out/storm/payload-2k
	bin/compare storm --clients $(STORM_CLIENTS_16K) --payload 16384 --out out/storm/payload-16k
	$(GO) run ./hack/benchdoc --from out

# Whole-controller convergence: each setting is QPS/burst/workers/events (all,
# warnings or none); "defaults" is rawwatch with no flags (the informer
# controller runs only the explicit settings). The default pair is the
# issue's question: both controllers at the settings a user would pick, and
# rawwatch as shipped. The old defaults are CONVERGE_SETTINGS=50/100/2/all
# (about 200 s per 10,000-object run).
CONVERGE_SETTINGS ?= 200/400/2/none,defaults
CONVERGE_RUNS     ?= 3

bench-converge: tools ## the real controller and an informer controller with the same reconciler, one at a time at CONVERGE_SETTINGS, CONVERGE_RUNS (3) runs each: time from 1,000 and 10,000 creates to every status Processed, requests per object, into out/converge
	$(GO) build -o bin/compare ./cmd/compare
	bin/compare converge --objects 1000 --runs $(CONVERGE_RUNS) --settings $(CONVERGE_SETTINGS) --out out/converge/n-1000
	bin/compare converge --objects 10000 --runs $(CONVERGE_RUNS) --settings $(CONVERGE_SETTINGS) --out out/converge/n-10000
