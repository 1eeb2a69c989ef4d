// Command compare runs the raw watcher, client-go informers and controller-runtime side by side on
// the same load and reports what each costs (see package compare).
//
//	compare                                   10,000 objects on a local control plane
//	compare --objects 1000 --update-rate 500  a smaller run
//	compare --kubeconfig ~/.kube/config       any cluster (no forced relist)
//	compare --wire cbor                       the consumers ask for CBOR (KEP-4222; the local control plane serves it)
//	compare storm --clients 50 --payload 2048 the relist storm: 50 clients of each kind relist at once
//	compare sizes --objects 10000             heap per cached object against payload (0, 2 and 16 KiB)
//	compare converge --objects 1000           the whole controller, raw and informer, until every status says Processed
//
// It writes report.md, report.json and report.svg (and each consumer's raw
// events and log) to --out, and prints the Markdown table.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"rawwatch/codec"
	"rawwatch/compare"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "consume":
			os.Exit(consume(os.Args[2:]))
		case "storm":
			os.Exit(untilSignal(storm, os.Args[2:]))
		case "sizes":
			os.Exit(untilSignal(sizes, os.Args[2:]))
		case "storm-consume":
			os.Exit(stormConsume(os.Args[2:]))
		case "converge":
			os.Exit(untilSignal(converge, os.Args[2:]))
		}
	}
	os.Exit(untilSignal(run, os.Args[1:]))
}

// untilSignal runs a subcommand whose context SIGINT or SIGTERM ends; the
// consumer processes (consume, storm-consume) keep the default and die.
func untilSignal(cmd func(context.Context, []string) int, args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return cmd(ctx, args)
}

func run(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	var o compare.Options
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "cluster to use (default: start a local control plane)")
	fs.IntVar(&o.Objects, "objects", 10000, "objects created before the consumers start (e.g. 1000, 10000, 50000)")
	fs.Float64Var(&o.UpdateRate, "update-rate", 1000, "updates per second in the update phase (0: as fast as the server takes)")
	fs.DurationVar(&o.UpdateDuration, "update-duration", 30*time.Second, "length of the update phase")
	fs.Float64Var(&o.DeleteFraction, "delete-fraction", 0.5, "fraction of the objects deleted in the last phase")
	fs.BoolVar(&o.Relist, "relist", true, "force a relist by restarting the apiserver (local control plane only)")
	kinds := fs.String("consumers", strings.Join(compare.AllKinds, ","), "consumers to run")
	costKinds := fs.String("apiserver-cost", strings.Join(compare.AllKinds, ","), "consumers first run alone, to measure what each costs the apiserver (\"\": none; local control plane only)")
	fs.IntVar(&o.Writers, "writers", 16, "parallel writers of the load generator")
	fs.IntVar(&o.Payload, "payload", 0, "bytes of filler annotation on every object")
	fs.StringVar(&o.PayloadAnnotation, "payload-annotation", compare.DefaultPayloadAnnotation,
		"the payload's annotation (kubectl.kubernetes.io/last-applied-configuration: where kubectl's client-side apply keeps its copy of the object)")
	fs.StringVar(&o.Transform, "transform", compare.TransformRaw,
		"which consumers drop the annotations rawwatch's reconciler never reads: raw (the raw consumers, as rawwatch does by default, and informer-stripped), all (every informer and controller-runtime too), none")
	fs.BoolVar(&o.Apply, "apply", false, "write the objects with server-side apply, so that they carry real managedFields")
	fs.StringVar(&o.OutDir, "out", "out/compare", "output directory")
	fs.BoolVar(&o.Profile, "profile", false, "write each consumer's heap profile at every phase end (KIND-PHASE.heap.pprof)")
	wireFlag(fs, &o.Wire, "encoding the consumers ask for: json or cbor (the local control plane then serves CBOR; controller-runtime and bare cannot ask and read JSON)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	o.Kinds = strings.Split(*kinds, ",")
	if *costKinds != "" {
		o.CostKinds = strings.Split(*costKinds, ",")
	}
	o.Progress = os.Stderr
	report, err := compare.Run(ctx, o)
	return publish("compare", report, err, o.OutDir, "report", report == nil || report.AllCorrect, "a consumer failed its correctness check")
}

func consume(args []string) int {
	fs := flag.NewFlagSet("consume", flag.ContinueOnError)
	var o compare.ConsumerOptions
	consumerFlags(fs, &o.Kind, &o.Kubeconfig, &o.Namespace, &o.ResultPath)
	fs.StringVar(&o.EventsPath, "events", "", "events file")
	fs.IntVar(&o.DropEvery, "drop-every", 0, "lose every n-th watch frame (to test the verdict)")
	drop := fs.String("drop-annotations", "", "annotations the consumer's cache does not keep, comma-separated")
	fs.StringVar(&o.ProfileDir, "profile-dir", "", "write heap profiles here at every mark")
	wireFlag(fs, &o.Wire, "encoding to ask for: json or cbor")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *drop != "" {
		o.DropAnnotations = strings.Split(*drop, ",")
	}
	return exitCode("consume", compare.RunConsumer(o, os.Stdin, os.Stdout))
}

func storm(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("storm", flag.ContinueOnError)
	var o compare.StormOptions
	fs.IntVar(&o.Objects, "objects", 10000, "objects every client caches")
	fs.IntVar(&o.Payload, "payload", 0, "bytes of filler annotation on every object")
	fs.IntVar(&o.Clients, "clients", 50, "clients of one kind, all in one consumer process, that relist at once")
	kinds := fs.String("consumers", strings.Join(compare.StormKinds, ","), "kinds to storm with, one after the other")
	qps := fs.Float64("client-qps", 200, "each client's own QPS limit")
	fs.IntVar(&o.ClientBurst, "client-burst", 400, "each client's own burst")
	fs.BoolVar(&o.Baseline, "baseline", true, "first restart the apiserver once with no client, for comparison")
	fs.DurationVar(&o.Interval, "interval", 100*time.Millisecond, "apiserver /metrics sampling interval")
	fs.StringVar(&o.OutDir, "out", "out/storm", "output directory")
	render := fs.Bool("render", false, "only render --out's storm.json again (storm.md, storm.svg)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *render {
		r, err := compare.ReadStormReport(filepath.Join(o.OutDir, "storm.json"))
		return publish("compare storm", r, err, o.OutDir, "", true, "")
	}
	o.ClientQPS = float32(*qps)
	o.Kinds = strings.Split(*kinds, ",")
	o.Progress = os.Stderr
	report, err := compare.RunStorm(ctx, o)
	return publish("compare storm", report, err, o.OutDir, "storm", report == nil || report.AllCorrect, "a mode failed its correctness check")
}

func sizes(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("sizes", flag.ContinueOnError)
	var o compare.SizesOptions
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "cluster to use (default: start a local control plane)")
	fs.IntVar(&o.Objects, "objects", 10000, "objects in each run")
	payloads := fs.String("payloads", "0,2048,16384", "payload sizes in bytes, comma-separated")
	kinds := fs.String("consumers", strings.Join(compare.SizesKinds, ","), "consumers to run")
	fs.StringVar(&o.OutDir, "out", "out/sizes", "output directory")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	o.Payloads = []int{}
	for _, p := range strings.Split(*payloads, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 0 {
			fmt.Fprintf(os.Stderr, "compare sizes: --payloads: %q is not a size in bytes\n", p)
			return 2
		}
		o.Payloads = append(o.Payloads, n)
	}
	o.Kinds = strings.Split(*kinds, ",")
	o.Progress = os.Stderr
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "compare sizes:", err)
		return 1
	}
	report, err := compare.RunSizes(ctx, o)
	return publish("compare sizes", report, err, o.OutDir, "sizes", true, "")
}

func stormConsume(args []string) int {
	fs := flag.NewFlagSet("storm-consume", flag.ContinueOnError)
	var o compare.StormConsumerOptions
	consumerFlags(fs, &o.Kind, &o.Kubeconfig, &o.Namespace, &o.ResultPath)
	fs.IntVar(&o.Clients, "clients", 50, "independent clients")
	fs.IntVar(&o.Objects, "objects", 0, "objects a synced client holds")
	qps := fs.Float64("qps", 200, "each client's QPS")
	fs.IntVar(&o.Burst, "burst", 400, "each client's burst")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	o.QPS = float32(*qps)
	return exitCode("storm-consume", compare.RunStormConsumer(o, os.Stdin, os.Stdout))
}

// wireFlag declares --wire (json, the default, or cbor): a value
// codec.ParseWire refuses fails the parse.
func wireFlag(fs *flag.FlagSet, w *codec.Wire, usage string) {
	*w = codec.WireJSON
	fs.Func("wire", usage+" (default json)", func(s string) (err error) {
		*w, err = codec.ParseWire(s)
		return err
	})
}

// consumerFlags declares the flags the harness gives every consumer
// process it starts (consume, storm-consume).
func consumerFlags(fs *flag.FlagSet, kind, kubeconfig, namespace, result *string) {
	fs.StringVar(kind, "kind", "", "consumer kind")
	fs.StringVar(kubeconfig, "kubeconfig", "", "kubeconfig")
	fs.StringVar(namespace, "namespace", "", "namespace")
	fs.StringVar(result, "result", "", "result file")
}

// exitCode is 0, or 1 with err on stderr under cmd's name.
func exitCode(cmd string, err error) int {
	if err != nil {
		fmt.Fprintln(os.Stderr, cmd+":", err)
		return 1
	}
	return 0
}

func converge(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("converge", flag.ContinueOnError)
	var o compare.ConvergeOptions
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "cluster to use (default: start a local control plane)")
	fs.IntVar(&o.Objects, "objects", 1000, "objects created while each controller runs")
	fs.IntVar(&o.Writers, "writers", 16, "parallel writers of the load generator (unthrottled)")
	fs.IntVar(&o.Runs, "runs", 1, "runs of every kind and setting, interleaved")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "how long one run may take to converge")
	kinds := fs.String("kinds", strings.Join(compare.ConvergeKinds, ","), "controllers to run: raw, informer, informer-stripped (managedFields dropped by a transform), controller-runtime (the reconciler on a controller-runtime manager)")
	settings := fs.String("settings", "50/100/2/all,200/400/2/all,200/400/2/none,defaults",
		"comma-separated settings, each QPS/BURST/WORKERS/EVENTS with EVENTS all, warnings or none, or defaults (rawwatch with no flags; raw only)")
	fs.StringVar(&o.OutDir, "out", "out/converge", "output directory")
	fs.BoolVar(&o.CPUProfiles, "cpu-profile", false, "write a CPU profile of every run (controller and harness, one process) into --out")
	render := fs.Bool("render", false, "only render --out's convergence.json again (convergence.md, convergence.svg)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "compare converge: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *render {
		r, err := compare.ReadConvergeReport(filepath.Join(o.OutDir, "convergence.json"))
		return publish("compare converge", r, err, o.OutDir, "", true, "")
	}
	o.Kinds = strings.Split(*kinds, ",")
	for _, s := range strings.Split(*settings, ",") {
		st, err := compare.ParseSetting(strings.TrimSpace(s))
		if err != nil {
			fmt.Fprintln(os.Stderr, "compare converge:", err)
			return 2
		}
		o.Settings = append(o.Settings, st)
	}
	o.Progress = os.Stderr
	report, err := compare.RunConverge(ctx, o)
	if report != nil && len(report.Runs) > 0 {
		// What converged is written even when a run failed.
		if code := publish("compare converge", report, nil, o.OutDir, "convergence", true, ""); code != 0 {
			return code
		}
	}
	return exitCode("compare converge", err)
}

// publish writes what a run reported (unless err says it failed) into dir,
// prints its Markdown table, and names the files written on stderr
// (name.{md,json,svg}; "" for none). It returns the exit code: 1, with the
// error on stderr, where the run or the write failed; 1, with failed on
// stderr, where the report's verdict is not ok.
func publish(cmd string, r interface {
	Write(dir string) error
	Markdown() string
}, err error, dir, name string, ok bool, failed string) int {
	if err == nil {
		err = r.Write(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, cmd+":", err)
		return 1
	}
	fmt.Println(r.Markdown())
	if name != "" {
		fmt.Fprintf(os.Stderr, "report: %s/%s.{md,json,svg}\n", dir, name)
	}
	if !ok {
		fmt.Fprintln(os.Stderr, cmd+":", failed)
		return 1
	}
	return 0
}
