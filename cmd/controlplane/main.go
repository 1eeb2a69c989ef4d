// Command controlplane starts a local etcd and kube-apiserver (see
// internal/controlplane), installs the CRD, writes an admin kubeconfig, and
// runs until interrupted. `make demo` and `make cluster` use it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"rawwatch/internal/controlplane"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "out/kubeconfig", "where to write the admin kubeconfig")
	noWatchCache := flag.Bool("no-watch-cache", false, "start the apiserver with --watch-cache=false (real 410s after etcd compaction)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cp, err := controlplane.Start(ctx, controlplane.Options{
		DisableWatchCache: *noWatchCache,
		Logf:              func(f string, a ...any) { fmt.Fprintf(os.Stderr, "controlplane: "+f+"\n", a...) },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "controlplane:", err)
		os.Exit(1)
	}
	defer cp.Stop()
	if err := os.MkdirAll(filepath.Dir(*kubeconfig), 0o755); err == nil {
		err = cp.WriteKubeconfig(*kubeconfig, cp.APIServer)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "controlplane:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "controlplane: ready; kubeconfig %s; etcd %s; Ctrl-C stops it\n", *kubeconfig, cp.EtcdURL)
	<-ctx.Done()
}
