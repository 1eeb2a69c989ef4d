package scorecard

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"rawwatch/api/v1alpha1"
	"rawwatch/client"
	"rawwatch/compare"
	"rawwatch/internal/controlplane"
	"rawwatch/store"
)

// Options configure Run. Zero values take the defaults.
type Options struct {
	// ControlPlane to run on (nil: Run starts one and stops it at the end).
	ControlPlane *controlplane.ControlPlane
	// Faults and Kinds to run (default: every fault, Kinds()).
	Faults, Kinds []string
	// Duration of each fault (default 20 s); Recover, how long after it a
	// client has to converge (default DefaultRecover).
	Duration, Recover time.Duration
	// OutDir receives each run's client log, events and requests
	// (OutDir/FAULT/KIND/).
	OutDir string
	// Binary is run as the client process (default: this executable, which
	// must call MaybeClientMain first thing).
	Binary string
	// Logf reports progress (optional).
	Logf func(format string, args ...any)
}

// Kinds are the clients a scorecard runs by default: every consumer kind of
// package compare that keeps a cache (bare keeps none: nothing to compare
// with the server), so a kind compare learns joins the table by itself;
// but informer-stripped, which is the informer with a transform (the same
// reflector, the same requests under every fault; its transform is for
// memory, which package compare measures): it runs when asked for.
func Kinds() []string {
	var out []string
	for _, k := range compare.AllKinds {
		if k != compare.KindBare && k != compare.KindInformerStripped {
			out = append(out, k)
		}
	}
	return out
}

// Row is one client under one fault.
type Row struct {
	Fault, Kind string
	Measure     Measure
	Verdict     string
	Why         string
	// Logged: lines the client wrote to its log from the fault's start to
	// its stop; LogSample, its commonest messages (digits masked) with counts.
	Logged    int
	LogSample []string
	// Err: the run could not be made (the row has no verdict).
	Err string `json:",omitempty"`
}

// Report is a scorecard.
type Report struct {
	Date string
	// Duration is each fault's but those that set their own; Recover, the
	// recovery window.
	Duration, Recover time.Duration
	// Lasted: the faults that lasted other than Duration, how long.
	Lasted map[string]time.Duration `json:",omitempty"`
	Kinds  []string
	Faults []string
	// SideBySide: the faults whose clients met them side by side, each
	// through its own proxy (the others', one after the other).
	SideBySide []string
	Rows       []Row
	// Took is the whole run's time; Command, what ran it; Commit, the
	// source it was built from.
	Took    time.Duration
	Command string `json:",omitempty"`
	Commit  string `json:",omitempty"`
}

func (o *Options) defaults() error {
	if len(o.Faults) == 0 {
		o.Faults = FaultNames()
	}
	for _, name := range o.Faults {
		if _, ok := faultNamed(name); !ok {
			return fmt.Errorf("unknown fault %q (%s)", name, strings.Join(FaultNames(), ", "))
		}
	}
	if len(o.Kinds) == 0 {
		o.Kinds = Kinds()
	}
	if o.Duration == 0 {
		o.Duration = 20 * time.Second
	}
	if o.Recover == 0 {
		o.Recover = DefaultRecover
	}
	if o.OutDir == "" {
		o.OutDir = "out/scorecard"
	}
	if o.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		o.Binary = exe
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return nil
}

// writeTick is the time between two ticks of the writer; each tick creates
// one object, updates one and deletes one of those there before the fault.
const writeTick = time.Second

// Run runs every fault against every client, one fault after the other:
// the fault's clients side by side, each in a namespace of its own through a
// proxy of its own (its requests counted on its own transport), but a Shared
// fault's one after the other.
func Run(ctx context.Context, o Options) (*Report, error) {
	start := time.Now()
	if err := o.defaults(); err != nil {
		return nil, err
	}
	cp := o.ControlPlane
	if cp == nil {
		o.Logf("starting a local control plane")
		var err error
		if cp, err = controlplane.Start(ctx, controlplane.Options{Logf: o.Logf}); err != nil {
			return nil, err
		}
		defer cp.Stop()
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, err
	}
	rep := &Report{Date: time.Now().UTC().Format(time.RFC3339), Duration: o.Duration, Recover: o.Recover,
		Kinds: o.Kinds, Faults: o.Faults, SideBySide: []string{}}
	r := &runner{o: o, cp: cp}
	for _, name := range o.Faults {
		f, _ := faultNamed(name)
		if d := r.duration(f); d != o.Duration {
			if rep.Lasted == nil {
				rep.Lasted = map[string]time.Duration{}
			}
			rep.Lasted[name] = d
		}
		together := !f.Shared
		if together {
			rep.SideBySide = append(rep.SideBySide, name)
		}
		rows := make([]Row, len(o.Kinds))
		var wg sync.WaitGroup
		for i, kind := range o.Kinds {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			one := func() {
				o.Logf("%s: %s", f.Name, kind)
				row, err := r.one(ctx, f, kind)
				if err != nil {
					row.Err = err.Error()
					o.Logf("%s: %s: %v", f.Name, kind, err)
				} else {
					o.Logf("%s: %s: %s %s", f.Name, kind, row.Verdict, row.Why)
				}
				rows[i] = row
			}
			if together {
				wg.Go(one)
			} else {
				one()
			}
		}
		wg.Wait()
		rep.Rows = append(rep.Rows, rows...)
	}
	rep.Took = time.Since(start)
	return rep, nil
}

// duration is how long f lasts: its own Duration, or the run's.
func (r *runner) duration(f Fault) time.Duration {
	if f.Duration > 0 {
		return f.Duration
	}
	return r.o.Duration
}

type runner struct {
	o  Options
	cp *controlplane.ControlPlane
}

// cells numbers the cells of the process, whose namespaces are named for
// them: a namespace of an earlier run may still be being deleted.
var cells atomic.Int64

// one runs one client under one fault, on a namespace of its own holding
// the same objects, with the same writes, as every other run.
func (r *runner) one(ctx context.Context, f Fault, kind string) (Row, error) {
	t0 := time.Now()
	row := Row{Fault: f.Name, Kind: kind}
	dir := filepath.Join(r.o.OutDir, f.Name, kind)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return row, err
	}
	// A proxy of its own: one whose port another process took while it
	// refused connections (a shared machine) spoils this run only.
	proxy, err := r.cp.FaultProxy(r.cp.APIServer)
	if err != nil {
		return row, err
	}
	defer proxy.Close()
	kubeconfig, err := filepath.Abs(filepath.Join(dir, "kubeconfig"))
	if err != nil {
		return row, err
	}
	if err := r.cp.WriteKubeconfigFor(kubeconfig, proxy.URL, ""); err != nil {
		return row, err
	}
	st := &stage{cp: r.cp, api: r.cp.APIServer, proxy: proxy}
	cfg := st.api.Config()
	c, err := client.New(cfg)
	if err != nil {
		return row, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return row, err
	}
	ns := fmt.Sprintf("sc-%d-%s", cells.Add(1), f.Name)
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return row, err
	}
	defer func() {
		_ = kube.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), ns, metav1.DeleteOptions{})
	}()
	st.kube, st.ns = kube, ns
	duration := r.duration(f)
	ticks := int(duration / writeTick)
	if err := createObjects(ctx, c, ns, 2*ticks+10); err != nil {
		return row, err
	}
	if f.prepare != nil {
		if err := f.prepare(ctx, st); err != nil {
			return row, fmt.Errorf("preparing the fault: %w", err)
		}
	}
	begin := time.Now()
	if f.Initial && f.start != nil {
		if err := f.start(ctx, st); err != nil {
			return row, fmt.Errorf("starting the fault: %w", err)
		}
	}
	p, err := startClient(r.o.Binary, kind, kubeconfig, ns, dir)
	if err != nil {
		return row, err
	}
	defer p.kill()
	st.client = p
	logFrom := 0
	if !f.Initial {
		if err := p.waitSynced(2 * time.Minute); err != nil {
			if p.exited() {
				return crashedRow(row, p), nil
			}
			return row, err
		}
		// Every client meets the fault in the same state: synced and watching.
		for waiting := time.Now(); st.proxy.OpenWatches() == 0; time.Sleep(50 * time.Millisecond) {
			if time.Since(waiting) > time.Minute {
				return row, errors.New("the client opened no WATCH within a minute of its sync")
			}
		}
		logFrom = lineCount(p.stderrPath)
		begin = time.Now()
	}
	w := &writer{c: c, ns: ns}
	wctx, stopWrites := context.WithDeadline(ctx, begin.Add(duration))
	var writing sync.WaitGroup
	writing.Go(func() { w.run(wctx, begin, ticks) })
	var startErr error
	if f.start != nil && !f.Initial {
		startErr = f.start(ctx, st)
	}
	writing.Wait()
	sleepUntil(wctx, begin.Add(duration)) // the last tick's writes end before the fault does
	stopWrites()
	stop := f.stop
	if stop == nil {
		stop = func(context.Context, *stage) error { return st.proxy.Heal() }
	}
	if err := stop(ctx, st); err != nil {
		return row, fmt.Errorf("ending the fault: %w", err)
	}
	if startErr != nil {
		return row, fmt.Errorf("starting the fault: %w", startErr)
	}
	end := time.Now()
	canary, canaryRV, canaryAt, err := w.canary(ctx, 2*ticks)
	if err != nil {
		return row, fmt.Errorf("the canary: %w", err)
	}

	// Recovery: until the store equals a fresh LIST and the handler heard
	// the canary at its resourceVersion, or the window ends.
	m := Measure{Duration: end.Sub(begin), Initial: f.Initial}
	var server map[string]string
	var equalSince time.Time
	for {
		if server, err = serverState(ctx, c, ns); err != nil {
			return row, err
		}
		mine, err := p.store()
		if err != nil {
			p.lost(&m, err)
			break
		}
		m.Missing, m.Extra, m.Stale = diff(server, mine)
		now := time.Now()
		if m.Missing+m.Extra+m.Stale > 0 {
			equalSince = time.Time{}
		} else if equalSince.IsZero() {
			equalSince = now
		}
		rv, err := p.heard(canary)
		if err != nil {
			p.lost(&m, err)
			break
		}
		if (!equalSince.IsZero() && rv == canaryRV) || now.Sub(end) > r.o.Recover {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	recovered := time.Now()
	if m.Converged = !equalSince.IsZero() && !m.Crashed && !m.Hung; m.Converged {
		m.ConvergedIn = equalSince.Sub(end)
	} else {
		m.ConvergedIn = recovered.Sub(end)
	}
	// What the client does right after its recovery counts too: its
	// requests, a crash; and it must still answer at the end.
	if !m.Crashed && !m.Hung {
		select {
		case <-p.done:
			m.Crashed = true
		case <-time.After(Grace):
			if _, err := p.store(); err != nil {
				p.lost(&m, err)
			}
		}
	}
	counted := time.Now()
	m.Window = counted.Sub(begin)
	select {
	case <-p.synced:
		m.Synced, m.SyncedIn = true, p.syncedAt.Sub(p.started)
	default:
	}
	if m.Crashed {
		m.Exit = tail(p.stderrPath)
	} else if !m.Hung {
		if res, err := p.stop(); err != nil {
			m.Hung, m.Exit = true, "told to stop: "+err.Error()
		} else {
			heapAndQueue(&m, res.Samples, begin, end)
		}
	}
	reqs, err := readRequests(filepath.Join(dir, requestsFile))
	if err != nil {
		return row, err
	}
	countRequests(&m, reqs, begin, counted)
	ev, err := readEvents(filepath.Join(dir, eventsFile), end, canary, canaryRV)
	if err != nil {
		return row, err
	}
	m.EventsAfter, m.HeardCanary = ev.after, !ev.canaryAt.IsZero()
	if m.HeardCanary {
		m.CanaryIn = ev.canaryAt.Sub(canaryAt)
	}
	m.NotHeard, m.HeardStale, m.HeardExtra, m.Ghosts = ev.against(server)
	row.Measure = m
	row.Verdict, row.Why = Verdict(m)
	row.Logged, row.LogSample = logSample(p.stderrPath, logFrom)
	// Where the cell's time went: its preparation (namespace, objects, the
	// client's start and sync), the fault, the recovery, the grace, the end.
	r.o.Logf("%s: %s: prepared %v, fault %v, recovery %v, grace %v, stop and count %v", f.Name, kind,
		begin.Sub(t0).Round(time.Millisecond), end.Sub(begin).Round(time.Millisecond), recovered.Sub(end).Round(time.Millisecond),
		counted.Sub(recovered).Round(time.Millisecond), time.Since(counted).Round(time.Millisecond))
	return row, nil
}

// lost: the client did not answer (err): its process ended (crashed), or
// is there and answers nothing (hung).
func (p *process) lost(m *Measure, err error) {
	if p.exited() {
		m.Crashed = true
		return
	}
	m.Hung, m.Exit = true, err.Error()
}

// crashedRow is the row of a client that ended before the fault began.
func crashedRow(row Row, p *process) Row {
	row.Measure = Measure{Crashed: true, Exit: tail(p.stderrPath)}
	row.Verdict, row.Why = Verdict(row.Measure)
	row.Logged, row.LogSample = logSample(p.stderrPath, 0)
	return row
}

// heapAndQueue: the handler's slowness shows in the client: its heap's
// growth over its value when the fault began, and the keys waiting in its
// queue, while the fault lasted.
func heapAndQueue(m *Measure, samples []sample, begin, end time.Time) {
	var heapAt uint64
	for _, smp := range samples {
		at := time.Unix(0, smp.At)
		if at.Before(begin) {
			heapAt = smp.HeapInuse
			continue
		}
		if at.After(end) {
			break
		}
		if heapAt == 0 {
			heapAt = smp.HeapInuse
		}
		m.HeapGrowth = max(m.HeapGrowth, int64(smp.HeapInuse)-int64(heapAt))
		m.MostQueued = max(m.MostQueued, smp.Queued)
	}
}

func objectName(i int) string { return fmt.Sprintf("obj-%03d", i) }

// createObjects creates n objects, 8 at a time.
func createObjects(ctx context.Context, c *client.Client, ns string, n int) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				o := &v1alpha1.MyResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: objectName(i)},
					Spec: v1alpha1.MyResourceSpec{Message: "initial"}}
				if _, err := c.Create(ctx, o); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	return <-errs
}

// writer makes the same writes in every run: at tick i (i seconds into the
// fault), it creates new-i, updates obj-2i and deletes obj-2i+1, straight
// to the apiserver (not through the proxy), each retried every 200 ms
// while the fault lasts (the apiserver may be restarting).
type writer struct {
	c  *client.Client
	ns string
}

func (w *writer) run(ctx context.Context, begin time.Time, ticks int) {
	for i := range ticks {
		if !sleepUntil(ctx, begin.Add(time.Duration(i)*writeTick)) {
			return
		}
		ops := []func() error{
			func() error {
				_, err := w.c.Create(ctx, &v1alpha1.MyResource{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: fmt.Sprintf("new-%03d", i)},
					Spec: v1alpha1.MyResourceSpec{Message: "created during the fault"}})
				if apierrors.IsAlreadyExists(err) {
					return nil
				}
				return err
			},
			func() error {
				_, err := w.c.Patch(ctx, w.ns, objectName(2*i), types.MergePatchType, fmt.Appendf(nil, `{"spec":{"message":"tick %d"}}`, i))
				return err
			},
			func() error {
				err := w.c.Delete(ctx, w.ns, objectName(2*i+1), metav1.DeleteOptions{})
				if apierrors.IsNotFound(err) {
					return nil
				}
				return err
			},
		}
		for _, op := range ops {
			for op() != nil {
				if !sleepUntil(ctx, time.Now().Add(200*time.Millisecond)) {
					return
				}
			}
		}
	}
}

// canary updates object i, which no tick touches, once the fault is over
// (retrying for a minute: the apiserver may be coming back), and returns its
// key and when the write succeeded: a client that hears it follows the
// server again.
func (w *writer) canary(ctx context.Context, i int) (key, rv string, at time.Time, err error) {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		var o *v1alpha1.MyResource
		if o, err = w.c.Patch(ctx, w.ns, objectName(i), types.MergePatchType, []byte(`{"spec":{"message":"canary"}}`)); err == nil {
			return store.Key(w.ns, objectName(i)), o.ResourceVersion, time.Now(), nil
		}
	}
	return "", "", time.Time{}, err
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// serverState is a fresh LIST of ns, straight from the apiserver: key → resourceVersion.
func serverState(ctx context.Context, c *client.Client, ns string) (map[string]string, error) {
	var l *v1alpha1.MyResourceList
	var err error
	// The apiserver may be coming back (a restart, a restore): a minute of retries.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(250 * time.Millisecond) {
		if l, err = c.List(ctx, ns, metav1.ListOptions{}); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("the fresh LIST: %w", err)
	}
	out := make(map[string]string, len(l.Items))
	for i := range l.Items {
		out[store.KeyOf(&l.Items[i])] = l.Items[i].ResourceVersion
	}
	return out, nil
}

// diff counts the keys mine lacks, holds beyond server, and holds at
// another resourceVersion.
func diff(server, mine map[string]string) (missing, extra, stale int) {
	for k, rv := range server {
		switch got, ok := mine[k]; {
		case !ok:
			missing++
		case got != rv:
			stale++
		}
	}
	for k := range mine {
		if _, ok := server[k]; !ok {
			extra++
		}
	}
	return missing, extra, stale
}

func lineCount(path string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), "\n")
}

// logSample counts the log lines from line from on, and gives the three
// commonest messages, digits masked, each with its count.
func logSample(path string, from int) (int, []string) {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if from > len(lines) || (len(lines) == 1 && lines[0] == "") {
		return 0, nil
	}
	lines = lines[from:]
	count := map[string]int{}
	for _, l := range lines {
		if _, msg, ok := strings.Cut(l, "] "); ok && len(l) > 0 && strings.ContainsRune("IWEF", rune(l[0])) {
			l = msg // klog's header: level, date, time, pid, file:line
		}
		l = strings.Map(func(r rune) rune {
			if r >= '0' && r <= '9' {
				return '#'
			}
			return r
		}, l)
		if len(l) > 200 {
			l = l[:200] + "…"
		}
		count[l]++
	}
	type kv struct {
		msg string
		n   int
	}
	var all []kv
	for m, n := range count {
		all = append(all, kv{m, n})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n || (all[i].n == all[j].n && all[i].msg < all[j].msg) })
	var out []string
	for _, e := range all[:min(3, len(all))] {
		out = append(out, fmt.Sprintf("%d× %s", e.n, e.msg))
	}
	return len(lines), out
}
