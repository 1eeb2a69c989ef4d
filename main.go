// Command rawwatch runs the MyResource controller: a list-then-watch loop
// written out by hand (package watcher) feeding a store and a key queue
// (package store) drained by reconcile workers (package reconcile); package
// internal/app assembles them.
//
// This file is wiring only: flags, the client configuration, and signals.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"rawwatch/internal/app"
)

type options struct {
	kubeconfig, context, master string
	namespace                   string
	workers                     int
	pageSize                    int64
	qps                         float64
	burst                       int
	retryBase, retryMax         time.Duration
}

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("rawwatch", flag.ContinueOnError)
	klog.InitFlags(fs)
	var o options
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "path to a kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster)")
	fs.StringVar(&o.context, "context", "", "kubeconfig context to use (default: its current-context)")
	fs.StringVar(&o.master, "master", "", "API server address, overriding the kubeconfig's")
	fs.StringVar(&o.namespace, "namespace", "", "watch only this namespace (default: all namespaces)")
	fs.IntVar(&o.workers, "workers", 2, "number of reconcile workers")
	fs.Int64Var(&o.pageSize, "page-size", 500, "LIST page size (limit)")
	fs.Float64Var(&o.qps, "kube-api-qps", 50, "client-side limit of requests per second to the API server")
	fs.IntVar(&o.burst, "kube-api-burst", 100, "client-side burst of requests to the API server")
	fs.DurationVar(&o.retryBase, "retry-base-delay", 5*time.Millisecond, "delay before the first retry of a failed key (doubles each retry)")
	fs.DurationVar(&o.retryMax, "retry-max-delay", 1000*time.Second, "longest delay between retries of a failed key")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Println("rawwatch", version)
		return 0
	}
	if o.workers < 1 || o.pageSize < 1 {
		fmt.Fprintln(os.Stderr, "rawwatch: --workers and --page-size must be at least 1")
		return 2
	}
	defer klog.Flush()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { // a second signal means "now"
		<-ctx.Done()
		stop()
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		<-sig
		klog.Warning("Second signal: exiting without draining")
		klog.Flush()
		os.Exit(1)
	}()

	if err := runController(ctx, o); err != nil {
		klog.ErrorS(err, "rawwatch failed")
		return 1
	}
	klog.Info("Stopped cleanly")
	return 0
}

func restConfig(o options) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: o.context}
	overrides.ClusterInfo.Server = o.master
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading client configuration: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	cfg.UserAgent = "rawwatch/" + version
	return cfg, nil
}

func runController(ctx context.Context, o options) error {
	cfg, err := restConfig(o)
	if err != nil {
		return err
	}
	a, err := app.New(app.Options{
		Config:    cfg,
		Namespace: o.namespace,
		Workers:   o.workers,
		PageSize:  o.pageSize,
		RetryBase: o.retryBase,
		RetryMax:  o.retryMax,
		Logger:    klog.Background(),
	})
	if err != nil {
		return err
	}
	return a.Run(ctx) // returns after ctx ends and in-flight work is done
}
