# rawwatch — `make demo` shows it working, `make test` proves it.
# Everything needed is built on first use: the local control plane
# (kube-apiserver, etcd) and kubectl from the Go module proxy into bin/
# (about 5 minutes once; cached in the user cache dir afterwards).

SHELL := /bin/bash
GO    ?= go
TOOLS := ./hack/ensure-tools.sh

.PHONY: all build test unit vet manifests verify-manifests tools demo demo-410 demo-drop demo-refuse demo-garbage demo-storm demo-faults cluster run chaos clean

all: build

build: ## the controller binary, bin/rawwatch
	$(GO) build -o bin/rawwatch .

tools: ## etcd, kube-apiserver, kubectl and controller-gen into bin/
	$(TOOLS) etcd kube-apiserver kubectl controller-gen

manifests: ## regenerate DeepCopy code and the CRD from api/v1alpha1
	$(TOOLS) controller-gen
	bin/controller-gen object paths=./api/...
	bin/controller-gen crd paths=./api/... output:crd:artifacts:config=config/crd

verify-manifests: ## fail if the generated files differ from what the Go types say
	./hack/verify-manifests.sh

vet:
	$(GO) vet ./...

test: tools verify-manifests vet ## everything CI runs
	$(GO) test -race -timeout 30m ./...

unit: ## only the tests that need no control plane
	$(GO) test -race -run 'Machine|Classify|Decode|Queue|Limiter|Store|Keys|Upsert|Replace|Desired|Reconcile[A-Z]|Controller|RawPackages|AddAfter|AddRateLimited|ShutDown|Proxy|Fuzz' ./...

demo: tools build ## local control plane + CRD + samples + controller, then kubectl get
	./hack/demo.sh

demo-410 demo-drop demo-refuse demo-garbage demo-storm: tools build ## one fault on purpose, narrated (hack/fault-demo.sh)
	./hack/fault-demo.sh $(@:demo-%=%)

demo-faults: tools build ## every fault demo, one after the other
	./hack/fault-demo.sh all

cluster: tools ## keep a local control plane running (kubeconfig: out/kubeconfig)
	$(GO) run ./cmd/controlplane --kubeconfig out/kubeconfig

chaos: tools ## the full chaos run (10,000 objects, 3 min of churn under faults); CHAOS_ARGS="--objects 1000 --duration 60s" for the short one
	$(GO) run ./cmd/chaos $(CHAOS_ARGS)

run: build ## the controller against your cluster: make run ARGS="--kubeconfig ~/.kube/config"
	bin/rawwatch $(ARGS)

clean:
	rm -rf bin out
