// Command rawwatch runs the MyResource controller: a list-then-watch loop
// written out by hand (package watcher) feeding a store and a key queue
// (package store) drained by reconcile workers (package reconcile); package
// app assembles them.
//
// This file is wiring only: flags, the client configuration, and signals.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"rawwatch/app"
	"rawwatch/codec"
	"rawwatch/explain"
	"rawwatch/flaglist"
	"rawwatch/freshness"
	"rawwatch/internal/authz"
	"rawwatch/internal/clientconfig"
	"rawwatch/leader"
	"rawwatch/queue"
	"rawwatch/reconcile"
	"rawwatch/reconcile/myresource"
	"rawwatch/ring"
	"rawwatch/store/detect"
	"rawwatch/watcher"
)

type options struct {
	kubeconfig, context, master string
	serviceAccountDir           string
	namespace                   string
	workers                     int
	pageSize                    int64
	minWatchTimeout             time.Duration
	silenceLimit                time.Duration
	watchList                   bool
	wire                        codec.Wire
	cacheDropAnnotations        string
	cacheMutationDetector       bool
	qps                         float64
	events                      myresource.EventPolicy
	burst                       int
	retryBase, retryMax         time.Duration
	metricsAddr, healthAddr     string
	uiAddr                      string
	secureServing               bool
	certDir                     string
	authTokenAudiences          string
	explain                     bool
	leaderElect                 bool
	lease                       leader.Config
	freshnessProbe              time.Duration
	freshnessNamespace          string
	sharding                    bool
	shards                      app.Sharding
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
	fs.StringVar(&o.serviceAccountDir, "serviceaccount-dir", clientconfig.DefaultServiceAccountDir,
		"where the in-cluster configuration reads the service account's token, ca.crt and namespace (used when no kubeconfig is found)")
	fs.StringVar(&o.namespace, "namespace", "", "watch only this namespace (default: all namespaces)")
	fs.IntVar(&o.workers, "workers", reconcile.DefaultWorkers, "number of reconcile workers")
	fs.Int64Var(&o.pageSize, "page-size", watcher.DefaultPageSize, "LIST page size (limit)")
	fs.DurationVar(&o.minWatchTimeout, "min-watch-timeout", watcher.DefaultWatchTimeoutMin, "each WATCH asks the server to end it after a random time between this and twice this")
	fs.DurationVar(&o.silenceLimit, "watch-silence-limit", watcher.DefaultSilenceLimit, "abandon and resume a WATCH that delivers nothing, not even a bookmark, for this long (the apiserver bookmarks about every minute)")
	fs.BoolVar(&o.watchList, "watch-list", false, "get the initial state from a WATCH that streams it (sendInitialEvents) instead of a paginated LIST; falls back to LIST on servers that refuse it")
	wire := fs.String("wire", string(codec.WireJSON), "encoding to ask the API server for: json, or cbor (KEP-4222; served for custom resources only with kube-apiserver's alpha feature gate CBORServingAndStorage; otherwise the server answers JSON and the watcher uses JSON, with one log line)")
	fs.StringVar(&o.cacheDropAnnotations, "cache-drop-annotations", strings.Join(myresource.UnreadAnnotations, ","),
		`annotations the cache does not keep, comma-separated: ones the reconciler never reads ("": keep every annotation)`)
	fs.BoolVar(&o.cacheMutationDetector, "cache-mutation-detector", false,
		"keep a copy of every cached object and compare them every second: a cached object changed in place (a reconciler bug) panics (one that has left the cache, only until as many writes as the cache holds, at least 64, or a relist follow); doubles the cache's memory (also on with "+detect.Env+"=true)")
	fs.Float64Var(&o.qps, "kube-api-qps", app.DefaultQPS, "client-side limit of requests per second to the API server")
	fs.IntVar(&o.burst, "kube-api-burst", app.DefaultBurst, "client-side burst of requests to the API server")
	events := fs.String("events", string(app.DefaultEvents), "which status writes get an Event: all (a Normal Processed or a Warning ReconcileFailed), warnings (failures only; a success shows in the status), none")
	fs.DurationVar(&o.retryBase, "retry-base-delay", queue.DefaultRetryBase, "delay before the first retry of a failed key (doubles each retry)")
	fs.DurationVar(&o.retryMax, "retry-max-delay", queue.DefaultRetryMax, "longest delay between retries of a failed key")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", "0", `address to serve /metrics on, e.g. ":8080" ("0": off)`)
	fs.StringVar(&o.healthAddr, "health-probe-bind-address", "0", `address to serve /healthz, /readyz and /leaderz on, e.g. ":8081" ("0": off)`)
	fs.StringVar(&o.uiAddr, "ui-bind-address", "0", `address to serve the live page of the mechanics on (/ui/), e.g. "127.0.0.1:8082" ("0": off)`)
	fs.BoolVar(&o.secureServing, "secure-serving", true, "serve /metrics and the live page over HTTPS, only to callers the API server authenticates (TokenReview) and RBAC allows to get the path (SubjectAccessReview); false: plain HTTP, on loopback addresses only. The health probes are always plain HTTP")
	fs.StringVar(&o.certDir, "tls-cert-dir", "", "directory with tls.crt and tls.key for secure serving, read again when they change (default: a self-signed certificate made at start)")
	fs.StringVar(&o.authTokenAudiences, "auth-token-audiences", "", "comma-separated audiences a caller's token must have been made for to read /metrics or the live page (as kube-rbac-proxy's flag): a token for the API server itself is then refused, and the controller cannot replay a caller's token there (default: the API server's audience)")
	fs.BoolVar(&o.explain, "explain", false, "narrate every list, watch event, queue operation and reconcile on stdout, for learning (colour on a terminal)")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "run the workers only while holding a Lease, so that several replicas can run with one active")
	fs.StringVar(&o.lease.Name, "leader-elect-resource-name", "rawwatch", "name of the Lease")
	fs.StringVar(&o.lease.Namespace, "leader-elect-resource-namespace", "", "namespace of the Lease (default: the pod's own namespace)")
	fs.DurationVar(&o.lease.LeaseDuration, "leader-elect-lease-duration", leader.DefaultLeaseDuration, "how long a standby waits after the last renewal before taking over")
	fs.DurationVar(&o.lease.RenewDeadline, "leader-elect-renew-deadline", leader.DefaultRenewDeadline, "how long the leader tries to renew before giving up (and exiting)")
	fs.DurationVar(&o.lease.RetryPeriod, "leader-elect-retry-period", leader.DefaultRetryPeriod, "how often candidates try to acquire, and the leader to renew")
	fs.DurationVar(&o.freshnessProbe, "freshness-probe", 0, "write a heartbeat this often into the MyResource "+freshness.DefaultName+" and time it through event, store and reconcile (rawwatch_freshness_probe_seconds; 0: off)")
	fs.StringVar(&o.freshnessNamespace, "freshness-probe-namespace", "", "namespace of the probe's object (default: --namespace, else the pod's own)")
	fs.BoolVar(&o.sharding, "sharding", false, "run as one of several replicas that divide the objects among themselves by a hash of their UIDs (each lists, watches, caches and reconciles only its part); not with --leader-elect")
	fs.StringVar(&o.shards.Ring, "sharding-ring", "rawwatch", "name of the ring: the replicas that share it divide the objects (a DNS label; their Leases are named <ring>.<identity>)")
	fs.StringVar(&o.shards.Namespace, "sharding-namespace", "", "namespace of the ring's Leases (default: the pod's own namespace)")
	fs.StringVar(&o.shards.Identity, "sharding-identity", "", "this replica's name in the ring (default: the host name and a random suffix)")
	fs.DurationVar(&o.shards.LeaseDuration, "sharding-lease-duration", ring.DefaultLeaseDuration, "a replica whose Lease was not renewed for this long is out, and its objects are taken over")
	fs.DurationVar(&o.shards.RenewPeriod, "sharding-renew-period", ring.DefaultRenewPeriod, "how often the ring's Leases are renewed and listed (at most a third of the lease duration)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Println("rawwatch", version)
		return 0
	}
	var err error
	if o.events, err = myresource.ParseEventPolicy(*events); err != nil {
		fmt.Fprintln(os.Stderr, "rawwatch: --events:", err)
		return 2
	}
	if o.wire, err = codec.ParseWire(*wire); err != nil {
		fmt.Fprintln(os.Stderr, "rawwatch: --wire:", err)
		return 2
	}
	if o.workers < 1 || o.pageSize < 1 || o.minWatchTimeout < time.Second || o.silenceLimit < time.Second {
		fmt.Fprintln(os.Stderr, "rawwatch: --workers and --page-size must be at least 1, --min-watch-timeout and --watch-silence-limit at least 1s")
		return 2
	}
	if o.freshnessProbe != 0 {
		if err := freshnessConfig(&o); err != nil {
			fmt.Fprintln(os.Stderr, "rawwatch:", err)
			return 2
		}
	}
	if o.leaderElect {
		if err := leaderConfig(&o); err != nil {
			fmt.Fprintln(os.Stderr, "rawwatch:", err)
			return 2
		}
	}
	if o.sharding {
		if err := shardingConfig(&o); err != nil {
			fmt.Fprintln(os.Stderr, "rawwatch:", err)
			return 2
		}
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

// leaderConfig completes the Lease's settings: its namespace defaults to the
// pod's own, which outside a pod must be given.
func leaderConfig(o *options) error {
	if o.lease.Namespace == "" {
		ns, err := clientconfig.Namespace(o.serviceAccountDir)
		if err != nil {
			return fmt.Errorf("--leader-elect needs --leader-elect-resource-namespace: %w", err)
		}
		o.lease.Namespace = ns
	}
	return o.lease.Validate()
}

// shardingConfig checks the ring's settings: its Leases live, by default, in
// the pod's own namespace.
func shardingConfig(o *options) error {
	switch {
	case o.leaderElect:
		return fmt.Errorf("--sharding and --leader-elect do not go together: with sharding every replica works, on its part")
	case o.freshnessProbe != 0:
		return fmt.Errorf("--sharding and --freshness-probe do not go together yet: the probe's one object lives in one replica's shard")
	}
	if err := ring.CheckDurations(o.shards.LeaseDuration, o.shards.RenewPeriod); err != nil {
		return fmt.Errorf("--sharding-lease-duration %v, --sharding-renew-period %v: %w", o.shards.LeaseDuration, o.shards.RenewPeriod, err)
	}
	if o.shards.Namespace != "" {
		return nil
	}
	ns, err := clientconfig.Namespace(o.serviceAccountDir)
	if err != nil {
		return fmt.Errorf("--sharding needs --sharding-namespace: %w", err)
	}
	o.shards.Namespace = ns
	return nil
}

// freshnessConfig checks the probe's settings: its object lives in the
// watched namespace, by default the pod's own.
func freshnessConfig(o *options) error {
	if o.freshnessProbe < time.Second {
		return fmt.Errorf("--freshness-probe must be at least 1s (or 0: off), not %v", o.freshnessProbe)
	}
	if o.freshnessNamespace = cmp.Or(o.freshnessNamespace, o.namespace); o.freshnessNamespace != "" {
		return nil
	}
	ns, err := clientconfig.Namespace(o.serviceAccountDir)
	if err != nil {
		return fmt.Errorf("--freshness-probe needs --freshness-probe-namespace: %w", err)
	}
	o.freshnessNamespace = ns
	return nil
}

func restConfig(o options) (*rest.Config, error) {
	cfg, source, err := clientconfig.Load(clientconfig.Options{
		Kubeconfig: o.kubeconfig, Context: o.context, Master: o.master, ServiceAccountDir: o.serviceAccountDir,
	})
	if err != nil {
		return nil, err
	}
	klog.InfoS("Client configuration", "source", source, "server", cfg.Host)
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	cfg.UserAgent = "rawwatch/" + version
	return cfg, nil
}

func runController(ctx context.Context, o options) error {
	cfg, err := restConfig(o)
	if err != nil {
		return err
	}
	var narrator *explain.Narrator
	if o.explain {
		narrator = explain.New(os.Stdout, explain.Options{Color: explain.UseColor(os.Stdout)})
	}
	var lease *leader.Config
	if o.leaderElect {
		lease = &o.lease
	}
	var sharding *app.Sharding
	if o.sharding {
		sharding = &o.shards
	}
	a, err := app.New(app.Options{
		Config:               cfg,
		Namespace:            o.namespace,
		Workers:              o.workers,
		Events:               o.events,
		CacheDropAnnotations: flaglist.Split(o.cacheDropAnnotations),
		DetectMutations:      o.cacheMutationDetector,
		PageSize:             o.pageSize,
		Watch:                watcher.Options[app.Object]{WatchTimeoutMin: o.minWatchTimeout, SilenceLimit: o.silenceLimit, WatchList: o.watchList},
		Wire:                 o.wire,
		RetryBase:            o.retryBase,
		RetryMax:             o.retryMax,
		Version:              version,
		MetricsAddr:          o.metricsAddr,
		HealthAddr:           o.healthAddr,
		UIAddr:               o.uiAddr,
		SecureServing:        o.secureServing,
		CertDir:              o.certDir,
		Authz:                authz.Options{Audiences: flaglist.Split(o.authTokenAudiences)},
		Explain:              narrator,
		LeaderElection:       lease,
		FreshnessProbe:       o.freshnessProbe,
		FreshnessNamespace:   o.freshnessNamespace,
		Sharding:             sharding,
	})
	if err != nil {
		return err
	}
	return a.Run(ctx) // returns after ctx ends (or the lease is lost) and in-flight work is done
}
