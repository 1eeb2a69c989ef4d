// Command controlplane starts a local etcd and kube-apiserver (see
// internal/controlplane), installs the CRD, writes an admin kubeconfig, and
// runs until interrupted. `make demo` and `make cluster` use it.
//
// With --fault-proxy ADDR it also puts a fault proxy (package faultproxy) in
// front of the apiserver: the kubeconfig then points at the proxy, a second
// one (KUBECONFIG-direct) at the apiserver itself, and faults are ordered
// over plain HTTP on ADDR (loopback only; no authentication):
//
//	curl -X POST http://ADDR/cut                  cut the watch streams
//	curl -X POST http://ADDR/expire               410 ERROR event in the streams
//	curl -X POST 'http://ADDR/refuse?for=5s'      refuse connections for 5 s
//	curl -X POST http://ADDR/compact              compact etcd (with --no-watch-cache: real 410s)
//	curl -X POST http://ADDR/restart              restart the apiserver
//	curl -X POST http://ADDR/snapshot             take a snapshot of etcd
//	curl -X POST http://ADDR/restore              restore it (no revision bump: time travel)
//	curl http://ADDR/                             the whole list
//
// `make demo-410`, `make demo-drop` and the other fault demos use it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"

	"rawwatch/faultproxy"
	"rawwatch/internal/controlplane"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "out/kubeconfig", "where to write the admin kubeconfig")
	noWatchCache := flag.Bool("no-watch-cache", false, "start the apiserver with --watch-cache=false (real 410s after etcd compaction)")
	faultAddr := flag.String("fault-proxy", "", "put a fault proxy in front of the apiserver and take fault commands over HTTP on this address (e.g. 127.0.0.1:0); its address is also written to KUBECONFIG.faults")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(f string, a ...any) { fmt.Fprintf(os.Stderr, "controlplane: "+f+"\n", a...) }
	cp, err := controlplane.Start(ctx, controlplane.Options{DisableWatchCache: *noWatchCache, Logf: logf})
	if err != nil {
		logf("%v", err)
		os.Exit(1)
	}
	defer cp.Stop()
	if err := serve(ctx, cp, *kubeconfig, *faultAddr, logf); err != nil {
		logf("%v", err)
		os.Exit(1)
	}
}

func serve(ctx context.Context, cp *controlplane.ControlPlane, kubeconfig, faultAddr string, logf func(string, ...any)) error {
	if err := os.MkdirAll(filepath.Dir(kubeconfig), 0o755); err != nil {
		return err
	}
	if faultAddr == "" {
		if err := cp.WriteKubeconfig(kubeconfig, cp.APIServer); err != nil {
			return err
		}
		logf("ready; kubeconfig %s; etcd %s; Ctrl-C stops it", kubeconfig, cp.EtcdURL)
		<-ctx.Done()
		return nil
	}

	proxy, err := cp.FaultProxy(cp.APIServer)
	if err != nil {
		return err
	}
	defer proxy.Close()
	direct := kubeconfig + "-direct"
	if err := cp.WriteKubeconfig(direct, cp.APIServer); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", faultAddr)
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	srv := &http.Server{Handler: controlHandler(ctx, cp, proxy, logf)}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	if err := os.WriteFile(kubeconfig+".faults", []byte(addr+"\n"), 0o644); err != nil {
		return err
	}
	// The kubeconfig last: scripts wait for it, and everything is ready then.
	if err := cp.WriteKubeconfigFor(kubeconfig, proxy.URL, ""); err != nil {
		return err
	}
	logf("ready; kubeconfig %s goes through the fault proxy, %s straight to the apiserver; etcd %s", kubeconfig, direct, cp.EtcdURL)
	logf("faults: curl -X POST http://%s/cut (or expire, refuse, garbage, fail, compact, restart, snapshot, restore; GET / lists them); Ctrl-C stops it", addr)
	<-ctx.Done()
	return nil
}

// controlHandler is the proxy's control surface plus faults of the control
// plane itself: compacting etcd, restarting the apiserver, and restoring
// etcd from a snapshot taken earlier (time travel).
func controlHandler(ctx context.Context, cp *controlplane.ControlPlane, proxy *faultproxy.Proxy, logf func(string, ...any)) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /compact", func(w http.ResponseWriter, r *http.Request) {
		rev, err := cp.Compact(r.Context())
		reply(w, fmt.Sprintf("compacted etcd up to revision %d: older resourceVersions are gone", rev), err)
	})
	mux.HandleFunc("POST /restart", func(w http.ResponseWriter, r *http.Request) {
		err := cp.APIServer.Restart(ctx)
		reply(w, "restarted the apiserver", err)
	})
	var snapshot atomic.Pointer[string]
	mux.HandleFunc("POST /snapshot", func(w http.ResponseWriter, r *http.Request) {
		dir, err := cp.Snapshot(r.Context())
		if err == nil {
			snapshot.Store(&dir)
		}
		reply(w, "took a snapshot of etcd (etcd stopped, copied, started again)", err)
	})
	mux.HandleFunc("POST /restore", func(w http.ResponseWriter, r *http.Request) {
		dir := snapshot.Load()
		if dir == nil {
			http.Error(w, "no snapshot taken: POST /snapshot first", http.StatusConflict)
			return
		}
		err := cp.Restore(ctx, *dir)
		reply(w, "restored etcd from the snapshot without a revision bump and restarted the apiserver: resourceVersions went back", err)
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, faultproxy.Help())
		io.WriteString(w, "and of the control plane:\n  compact   compact etcd to its current revision\n  restart   restart the apiserver\n"+
			"  snapshot  take a snapshot of etcd\n  restore   restore etcd from it (no revision bump: time travel) and restart the apiserver\n")
	})
	mux.Handle("/", logged(proxy.Handler(), logf))
	return mux
}

func reply(w http.ResponseWriter, ok string, err error) {
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	fmt.Fprintln(w, ok)
}

// logged logs every fault ordered.
func logged(h http.Handler, logf func(string, ...any)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			logf("fault: %s", r.URL.RequestURI())
		}
		h.ServeHTTP(w, r)
	})
}
