// Command chaos runs the controller through faults while its objects churn,
// and prints a verdict: did it lose anything? (See package chaos.)
//
//	make chaos                          the full run: 10,000 objects, 3 minutes
//	go run ./cmd/chaos --objects 1000 --duration 60s
//	go run ./cmd/chaos --break drop-events   see what a failing verdict looks like
//	go run ./cmd/chaos --budget         the request budget: each persistent fault
//	                                    alone for 2 minutes (chaos.Budget)
//
// It starts its own local control plane. The report goes to stdout, the
// controller's log to --controller-log. Exit status: 0 nothing lost (with
// --budget: every fault within the budget, every time converged), 1 a loss (a
// fault over the budget, or not converged), 2 the run could not be made.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"rawwatch/chaos"
	"rawwatch/faultproxy"
	"rawwatch/internal/controlplane"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg chaos.Config
	var qps float64
	fs.IntVar(&cfg.Objects, "objects", 10000, "objects the churn keeps alive")
	fs.DurationVar(&cfg.Duration, "duration", 3*time.Minute, "how long the objects churn under faults")
	fs.Float64Var(&cfg.ChurnRate, "churn-rate", 100, "changes per second (updates, deletes, creates, replaces)")
	fs.IntVar(&cfg.Writers, "writers", 8, "goroutines making the changes")
	fs.IntVar(&cfg.Workers, "workers", 4, "the controller's reconcile workers")
	fs.DurationVar(&cfg.RetryMax, "retry-max-delay", 1000*time.Second, "the controller's longest delay between retries of a failed key")
	fs.Float64Var(&qps, "kube-api-qps", 200, "the controller's client-side request rate limit")
	fs.IntVar(&cfg.Burst, "kube-api-burst", 400, "the controller's client-side burst")
	fs.DurationVar(&cfg.CutEvery, "cut-every", 2*time.Second, "cut the watch stream about this often (negative: never)")
	fs.DurationVar(&cfg.ExpireEvery, "expire-every", 10*time.Second, "send a 410 ERROR event into the stream about this often (negative: never)")
	fs.DurationVar(&cfg.CompactEvery, "compact-every", 10*time.Second, "compact etcd, the controller cut off for 1 s, about this often (negative: never)")
	fs.BoolVar(&cfg.NoRestart, "no-restart", false, "do not restart the apiserver (at 30% of --duration)")
	fs.BoolVar(&cfg.NoPhases, "no-phases", false, "skip the persistent faults (flap-cut, flap-error, freeze) of the last part of the run")
	fs.IntVar(&cfg.Compress, "compress", 1, "make the watcher's backoff and watchdog this many times quicker (the test suite's short run: 15)")
	fs.DurationVar(&cfg.Converge, "converge", 30*time.Minute, "how long the controller has to catch up after the faults")
	fs.DurationVar(&cfg.MaxConvergence, "max-convergence", chaos.DefaultMaxConvergence, "the verdict fails if the controller takes longer than this to catch up after the faults (negative: no bound)")
	fs.IntVar(&cfg.Replicas, "replicas", 1, "run this many replicas with --sharding, dividing the objects; one is killed at 40% of --duration and another started at 55% (with half again the ring's lease duration and renew period), while others write to the ring's Leases")
	fs.DurationVar(&cfg.RingLease, "sharding-lease-duration", 0, "with --replicas: the ring's lease duration (default the binary's, 15s)")
	fs.DurationVar(&cfg.RingRenew, "sharding-renew-period", 0, "with --replicas: the ring's renew period (default the binary's, 2s)")
	budget := fs.Bool("budget", false, "measure the request budget instead: the watcher's LISTs and WATCHes a minute under each persistent fault alone, then whether it converged")
	var bcfg chaos.BudgetConfig
	fs.DurationVar(&bcfg.Each, "budget-each", 2*time.Minute, "with --budget: how long each fault lasts")
	fs.DurationVar(&bcfg.Recover, "budget-recover", time.Minute, "with --budget: how long the controller has to converge after each fault")
	faults := fs.String("budget-faults", "", "with --budget: the faults to measure, comma-separated (default all: "+strings.Join(chaos.BudgetFaultNames(), ", ")+")")
	breakWhat := fs.String("break", "", `break something on purpose: "drop-events" makes the proxy swallow every MODIFIED and DELETED event, and turns off the faults that relist (a relist would repair the loss) and the persistent ones`)
	logPath := fs.String("controller-log", "out/chaos-controller.log", "where the controller's log goes")
	verbosity := fs.Int("v", 2, "the controller's log verbosity")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg.QPS = float32(qps)
	if *faults != "" {
		bcfg.Faults = strings.Split(*faults, ",")
		names := chaos.BudgetFaultNames()
		for _, name := range bcfg.Faults {
			if !slices.Contains(names, name) {
				fmt.Fprintf(stderr, "chaos: unknown --budget-faults %q (%s)\n", name, strings.Join(names, ", "))
				return 2
			}
		}
	}
	switch *breakWhat {
	case "":
	case "drop-events":
		cfg.ExpireEvery, cfg.CompactEvery, cfg.NoRestart, cfg.NoPhases = -1, -1, true, true
		cfg.Sabotage = func(p *faultproxy.Proxy) { p.Drop("MODIFIED", "DELETED") }
	default:
		fmt.Fprintf(stderr, "chaos: unknown --break %q (drop-events)\n", *breakWhat)
		return 2
	}

	if err := os.MkdirAll(filepath.Dir(*logPath), 0o755); err != nil {
		fmt.Fprintln(stderr, "chaos:", err)
		return 2
	}
	logFile, err := os.Create(*logPath)
	if err != nil {
		fmt.Fprintln(stderr, "chaos:", err)
		return 2
	}
	defer logFile.Close()
	cfg.Logger = textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(logFile), textlogger.Verbosity(*verbosity)))
	klog.SetLogger(cfg.Logger) // client-go logs through klog's globals (the event recorder, the REST client)
	cfg.Logf = func(format string, args ...any) {
		fmt.Fprintf(stderr, "%s chaos: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cp, err := controlplane.Start(ctx, controlplane.Options{Logf: cfg.Logf})
	if err != nil {
		fmt.Fprintln(stderr, "chaos:", err)
		return 2
	}
	defer cp.Stop()
	cfg.Logf("controller log: %s", *logPath)
	// A chaos run or a budget measurement: either prints its report and
	// lists its failures.
	var rep interface {
		Print(io.Writer)
		Failures() []string
	}
	if *budget {
		bcfg.Logger, bcfg.Logf = cfg.Logger, cfg.Logf
		rep, err = chaos.Budget(ctx, cp, bcfg)
	} else {
		rep, err = chaos.Run(ctx, cp, cfg)
	}
	if err != nil {
		fmt.Fprintln(stderr, "chaos:", err)
		return 2
	}
	rep.Print(stdout)
	if len(rep.Failures()) > 0 {
		return 1
	}
	return 0
}
