package chaos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"rawwatch/app"
	"rawwatch/client"
	"rawwatch/faultproxy"
	"rawwatch/internal/controlplane"
	"rawwatch/observe"
	"rawwatch/watcher"
)

// The request budget, measured: each persistent fault alone, for a fixed
// time, against the controller as the chaos run wires it (a fault proxy in
// front of an apiserver of its own, here with its watch cache on: it
// bookmarks streams and serves WatchList), with the watcher's real backoff,
// while a few objects change so that every stream has something to carry. For each
// fault, the LISTs and WATCHes the watcher made, counted on its own transport
// (a refused connection counts; the proxy never sees it), against the bound
// its backoff promises: at most 45 in any minute. Then the fault is lifted,
// and the controller must converge (its store equal to a fresh LIST) within
// BudgetConfig.Recover.
//
// Each fault gets a fresh controller, synced and watching before the fault
// begins, so that every row starts from a calm backoff: the busiest minute is
// the first.

// BudgetFault is one persistent fault of the measurement.
type BudgetFault struct {
	Name, What string
	// WatchList: the controller gets its initial state by WatchList.
	WatchList bool
	// on starts the fault; Proxy.Heal ends it.
	on func(*faultproxy.Proxy)
}

// BudgetFaults are the faults Budget measures, in order.
var BudgetFaults = []BudgetFault{
	{Name: "flap-cut", What: "every WATCH cut after its first frame",
		on: func(p *faultproxy.Proxy) { p.FlapCut(true) }},
	{Name: "flap-error", What: "every WATCH ended by a 500 ERROR event after its first event",
		on: func(p *faultproxy.Proxy) { p.FlapError(true) }},
	{Name: "freeze", What: "WATCH streams open, passing nothing",
		on: func(p *faultproxy.Proxy) { p.Freeze(true) }},
	// A WatchList is made only to (re)list: with live streams failing too,
	// every relist is a WatchList that fails, then the LIST instead.
	{Name: "watchlist-fail", What: "WatchList on; every WatchList fails after its first object, every WATCH after its first event", WatchList: true,
		on: func(p *faultproxy.Proxy) { p.WatchListFail(true); p.FlapError(true) }},
	{Name: "refuse", What: "connections refused",
		on: func(p *faultproxy.Proxy) { p.Refuse() }},
	// A failure answers requests; the stream already open is cut, or it
	// would carry on as if nothing had happened.
	{Name: "500", What: "every request answered 500 (the open stream cut)",
		on: func(p *faultproxy.Proxy) {
			p.Fail(faultproxy.Failure{Code: http.StatusInternalServerError})
			p.CutWatches()
		}},
	{Name: "429", What: "every request answered 429, Retry-After 1s (the open stream cut)",
		on: func(p *faultproxy.Proxy) {
			p.Fail(faultproxy.Failure{Code: http.StatusTooManyRequests, RetryAfter: time.Second})
			p.CutWatches()
		}},
}

// BudgetConfig describes a measurement. Zero values take the defaults.
type BudgetConfig struct {
	// Faults names the faults to measure, in the order of BudgetFaults
	// (default: all).
	Faults []string
	// Each is how long each fault lasts (default 2 minutes).
	Each time.Duration
	// Recover is how long the controller has to converge once a fault is
	// lifted (default 60 s).
	Recover time.Duration
	// Objects is the population (default 1,000); ChurnRate the changes a
	// second made while a fault lasts (default 10).
	Objects   int
	ChurnRate float64
	// Logger is the controller's logger (default klog's); Logf reports
	// progress (optional).
	Logger klog.Logger
	Logf   func(format string, args ...any)
}

// BudgetFaultNames lists BudgetFaults' names, in order.
func BudgetFaultNames() []string {
	var names []string
	for _, f := range BudgetFaults {
		names = append(names, f.Name)
	}
	return names
}

func (c *BudgetConfig) defaults() error {
	names := BudgetFaultNames()
	if len(c.Faults) == 0 {
		c.Faults = names
	}
	for _, name := range c.Faults {
		if !slices.Contains(names, name) {
			return fmt.Errorf("unknown fault %q (%s)", name, strings.Join(names, ", "))
		}
	}
	c.Each = cmp.Or(c.Each, 2*time.Minute)
	c.Recover = cmp.Or(c.Recover, time.Minute)
	c.Objects = cmp.Or(c.Objects, 1000)
	c.ChurnRate = cmp.Or(c.ChurnRate, 10)
	defaultLogging(&c.Logger, &c.Logf)
	return nil
}

// BudgetRow is one fault's measure.
type BudgetRow struct {
	Fault BudgetFault
	// Requests: the watcher's, counted on its transport, while the fault
	// lasted; Busiest, the most LISTs and WATCHes in any minute of it;
	// Reached, those that reached the proxy.
	Requests, Reached faultproxy.Rate
	Busiest           int
	// Silent counts the streams the watchdog abandoned during the fault.
	Silent int
	// Converged: the store equalled a fresh LIST, ConvergedIn after the
	// fault was lifted; Diff is what still differed if it did not.
	Converged   bool
	ConvergedIn time.Duration
	Diff        []string
}

// BudgetReport is a measurement's outcome.
type BudgetReport struct {
	Config BudgetConfig
	// Bound is the watcher's: the most LISTs and WATCHes in any minute.
	Bound int
	Rows  []BudgetRow
}

// Budget measures the watcher's requests under each persistent fault on cp
// (see BudgetFaults). An error means the measurement could not be made; a
// fault over the bound, or a controller that did not converge, is in the
// report's Failures.
func Budget(ctx context.Context, cp *controlplane.ControlPlane, cfg BudgetConfig) (*BudgetReport, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	rep := &BudgetReport{Config: cfg, Bound: requestBound(watcher.DefaultBackoff)}
	// An apiserver with its watch cache on, as in production: it bookmarks
	// streams and serves WatchList.
	cfg.Logf("starting an apiserver")
	st, err := newStage(ctx, cp, "budget", cfg.Objects, cfg.ChurnRate, cfg.Logf)
	if err != nil {
		return nil, err
	}
	defer st.close()
	target, proxy, ns, churn := st.target, st.proxy, st.ns, st.churn
	for _, name := range cfg.Faults {
		f := BudgetFaults[slices.IndexFunc(BudgetFaults, func(f BudgetFault) bool { return f.Name == name })] // defaults checked the name
		row, err := measure(ctx, cfg, f, target, proxy, ns, churn)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name, err)
		}
		rep.Rows = append(rep.Rows, row)
	}
	if errs := churn.errors(); len(errs) > 0 {
		return nil, fmt.Errorf("%d churn writes failed, the first: %w", len(errs), errs[0])
	}
	return rep, nil
}

// measure runs one fault against a fresh controller.
func measure(ctx context.Context, cfg BudgetConfig, f BudgetFault, target *controlplane.APIServer, proxy *faultproxy.Proxy,
	ns string, churn *churner) (BudgetRow, error) {
	row := BudgetRow{Fault: f}
	ctrlCfg := target.ConfigVia(proxy.URL)
	ctrlCfg.QPS, ctrlCfg.Burst = 200, 400 // as in the chaos run: the client's limiter must not be what spaces requests
	meter := faultproxy.NewMeter()
	ctrlCfg.Wrap(meter.Wrap)
	var silent atomic.Int64
	ctrl, err := app.New(app.Options{Config: ctrlCfg, Namespace: ns,
		Watch: watcher.Options[app.Object]{WatchList: f.WatchList},
		Observer: observe.Func(func(e observe.Event) {
			if e, ok := e.(watcher.WatchEnded); ok && errors.Is(e.Err, watcher.ErrSilent) {
				silent.Add(1)
			}
		})})
	if err != nil {
		return row, err
	}
	stopCtrl, err := runSynced(ctx, ctrl, cfg.Logger, true)
	defer stopCtrl()
	if err != nil {
		return row, err
	}
	// Every fault meets the watcher in the same state: watching.
	for watching := time.Now(); proxy.OpenWatches() == 0; {
		if time.Since(watching) > time.Minute {
			return row, errors.New("the controller did not open a WATCH within a minute of its sync")
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return row, ctx.Err()
		}
	}

	cfg.Logf("%s for %v: %s", f.Name, cfg.Each, f.What)
	churnCtx, stopChurn := context.WithCancel(ctx)
	churned := make(chan struct{})
	go func() { churn.run(churnCtx, 2); close(churned) }()
	begin, silentBefore := time.Now(), silent.Load()
	f.on(proxy)
	sleep(ctx, cfg.Each)
	row.Silent = int(silent.Load() - silentBefore)
	if err := proxy.Heal(); err != nil {
		stopChurn()
		<-churned
		return row, err
	}
	end := time.Now()
	stopChurn()
	<-churned
	row.Requests = meter.Between(begin, end)
	row.Busiest = meter.Busiest(begin, end, time.Minute)
	row.Reached = proxy.Meter().Between(begin, end)

	c, err := client.New(target.Config())
	if err != nil {
		return row, err
	}
	for {
		list, err := c.List(ctx, ns, metav1.ListOptions{})
		if err != nil {
			return row, fmt.Errorf("the fresh LIST: %w", err)
		}
		row.ConvergedIn = time.Since(end)
		if row.Diff, _ = storeDiff(list.Items, ctrl.Store); len(row.Diff) == 0 {
			row.Converged = true
			return row, nil
		}
		if row.ConvergedIn > cfg.Recover {
			return row, nil
		}
		if !sleep(ctx, 500*time.Millisecond) {
			return row, ctx.Err()
		}
	}
}

// Failures lists the faults over the bound and the controllers that did not
// converge; empty means every fault kept to the budget and was recovered from.
func (r *BudgetReport) Failures() []string {
	var out []string
	for _, row := range r.Rows {
		if row.Busiest > r.Bound {
			out = append(out, fmt.Sprintf("%s: %d LISTs and WATCHes in one minute, bound %d", row.Fault.Name, row.Busiest, r.Bound))
		}
		if !row.Converged {
			out = append(out, fmt.Sprintf("%s: the store still differed from the server %v after the fault: %s",
				row.Fault.Name, r.Config.Recover, sample(row.Diff)))
		}
	}
	return out
}

// Print writes the table.
func (r *BudgetReport) Print(w io.Writer) {
	c := r.Config
	fmt.Fprintf(w, "request budget: each fault alone for %v, %d objects changing %.0f times a second, the watcher at its real backoff\n",
		c.Each, c.Objects, c.ChurnRate)
	fmt.Fprintf(w, "bound: %d LISTs and WATCHes in any minute (counted on the watcher's transport; a LIST of many pages once); watchdog: silent streams abandoned;\n", r.Bound)
	fmt.Fprintf(w, "converged: the store equals a fresh LIST within %v of the fault's end\n\n", c.Recover)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "fault\tLISTs/min\tWATCHes/min\tbusiest minute\twithin bound\treached the proxy/min\twatchdog\tconverged\t")
	for _, row := range r.Rows {
		q := row.Requests
		within := "yes"
		if row.Busiest > r.Bound {
			within = "NO"
		}
		converged := fmt.Sprintf("in %v", row.ConvergedIn.Round(100*time.Millisecond))
		if !row.Converged {
			converged = fmt.Sprintf("NO (differences: %d)", len(row.Diff))
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%d\t%s\t%.1f\t%d\t%s\t\n", row.Fault.Name, q.PerMinute(q.Lists), q.PerMinute(q.Watches),
			row.Busiest, within, row.Reached.PerMinute(row.Reached.Requests()), row.Silent, converged)
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, row := range r.Rows {
		fmt.Fprintf(w, "  %-14s %s\n", row.Fault.Name, row.Fault.What)
	}
	if f := r.Failures(); len(f) > 0 {
		fmt.Fprintf(w, "\nBUDGET: FAIL\n")
		for _, line := range f {
			fmt.Fprintf(w, "  %s\n", line)
		}
		return
	}
	fmt.Fprintf(w, "\nBUDGET: PASS — every fault within %d requests a minute, every time converged\n", r.Bound)
}
