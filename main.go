// Command rawwatch runs the MyResource controller: a list-then-watch loop
// written out by hand (package watcher) feeding a store and a key queue
// (package store) drained by reconcile workers (package reconcile).
//
// This file is wiring only: flags, clients, and the order things start and
// stop in.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"rawwatch/api/v1alpha1"
	"rawwatch/client"
	"rawwatch/reconcile"
	"rawwatch/store"
	"rawwatch/watcher"
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
	if err := fs.Parse(args); err != nil {
		return 2
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
	cfg.UserAgent = "rawwatch"
	return cfg, nil
}

func runController(ctx context.Context, o options) error {
	cfg, err := restConfig(o)
	if err != nil {
		return err
	}
	myClient, err := client.New(cfg)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	log := klog.FromContext(ctx)

	events := record.NewBroadcaster(record.WithContext(ctx))
	events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	defer events.Shutdown()
	recorder := events.NewRecorder(client.Scheme, corev1.EventSource{Component: "rawwatch"})

	cache := store.New[*v1alpha1.MyResource]()
	queue := store.NewQueue(store.MaxOf(
		store.NewExponentialLimiter(o.retryBase, o.retryMax),
		store.NewBucketLimiter(10, 100),
	))
	ctrl := &reconcile.Controller[*v1alpha1.MyResource]{
		Queue:  queue,
		Logger: log.WithName("controller"),
		Reconciler: &reconcile.MyResourceReconciler{
			Store: cache, Client: myClient, Recorder: recorder, Logger: log.WithName("reconciler"),
		},
	}
	w := watcher.New(
		watcher.RESTSource{Client: myClient.REST(), Resource: v1alpha1.Resource, Namespace: o.namespace},
		cache,
		watcher.Options[*v1alpha1.MyResource]{
			PageSize: o.pageSize,
			Handler:  ctrl.OnDelta,
			Codec:    watcher.Codec[*v1alpha1.MyResource]{GVK: v1alpha1.GroupVersionKind},
			Logger:   log.WithName("watcher"),
		})

	var wg sync.WaitGroup
	wg.Go(func() { w.Run(ctx) })

	klog.InfoS("Waiting for the first list", "server", cfg.Host, "namespace", o.namespace)
	select {
	case <-w.Synced():
	case <-ctx.Done():
		wg.Wait()
		return nil
	}
	klog.InfoS("Synced; starting workers", "objects", cache.Len(), "resourceVersion", w.ResourceVersion(), "workers", o.workers)
	ctrl.Run(ctx, o.workers) // returns after ctx ends and in-flight work is done
	wg.Wait()
	return nil
}
