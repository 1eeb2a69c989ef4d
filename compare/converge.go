package compare

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"rawwatch/api/v1alpha1"
	"rawwatch/app"
	"rawwatch/client"
	"rawwatch/internal/controlplane"
	"rawwatch/reconcile"
	"rawwatch/reconcile/myresource"
	"rawwatch/store"
)

// ConvergeKinds are the controllers a convergence run compares by default;
// convergeKinds are all it can run: also the informer controller with
// managedFields stripped, and the reconciler on controller-runtime.
var (
	ConvergeKinds = []string{KindRaw, KindInformer}
	convergeKinds = []string{KindRaw, KindInformer, KindInformerStripped, KindControllerRuntime}
)

// Setting is one set of client settings a controller runs with.
type Setting struct {
	QPS     float32 `json:"qps"`
	Burst   int     `json:"burst"`
	Workers int     `json:"workers"`
	// Events: which status writes get an Event (myresource.EventPolicy).
	Events myresource.EventPolicy `json:"events"`
	// Defaults: rawwatch's shipped defaults (app.DefaultQPS, DefaultBurst,
	// DefaultEvents, reconcile.DefaultWorkers); raw only.
	Defaults bool `json:"defaults,omitempty"`
}

// DefaultsSetting is the setting rawwatch runs with when given no flags.
var DefaultsSetting = Setting{QPS: app.DefaultQPS, Burst: app.DefaultBurst, Workers: reconcile.DefaultWorkers, Events: app.DefaultEvents, Defaults: true}

func (s Setting) String() string {
	if s.Defaults {
		return "defaults"
	}
	return fmt.Sprintf("%g/%d/%d/%s", s.QPS, s.Burst, s.Workers, s.Events)
}

// ParseSetting reads "QPS/BURST/WORKERS/EVENTS", EVENTS an event policy
// (all, warnings, none; e.g. "200/400/2/none"), or "defaults".
func ParseSetting(s string) (Setting, error) {
	if s == "defaults" {
		return DefaultsSetting, nil
	}
	f := strings.Split(s, "/")
	bad := fmt.Errorf("setting %q: want QPS/BURST/WORKERS/EVENTS, EVENTS all, warnings or none (e.g. 50/100/2/all), or defaults", s)
	if len(f) != 4 {
		return Setting{}, bad
	}
	qps, err1 := strconv.ParseFloat(f[0], 32)
	burst, err2 := strconv.Atoi(f[1])
	workers, err3 := strconv.Atoi(f[2])
	events, err4 := myresource.ParseEventPolicy(f[3])
	if errors.Join(err1, err2, err3, err4) != nil {
		return Setting{}, bad
	}
	if qps <= 0 || burst < 1 || workers < 1 {
		return Setting{}, fmt.Errorf("setting %q: QPS must be above 0, burst and workers at least 1", s)
	}
	return Setting{QPS: float32(qps), Burst: burst, Workers: workers, Events: events}, nil
}

// ConvergeOptions configure a convergence run: for every setting and kind,
// a controller is started in a fresh namespace, N objects are created as fast
// as the server takes them, and the time until every status says Processed
// is measured by a watch of the harness's own.
type ConvergeOptions struct {
	// Kubeconfig "" starts a local control plane.
	Kubeconfig string
	// Objects is N (default 1,000); Writers the load generator's
	// parallelism (default 16).
	Objects, Writers int
	Kinds            []string // default ConvergeKinds
	Settings         []Setting
	// Runs of every kind and setting (default 1), interleaved.
	Runs int
	// Timeout for one run to converge (default 10 minutes).
	Timeout  time.Duration
	OutDir   string
	Progress io.Writer
	// CPUProfiles writes a CPU profile of this process (the controller, the
	// harness's watch and the load generator) for every run into OutDir
	// (KIND-SETTING-RUN.cpu.pprof).
	CPUProfiles bool
}

// ConvergeReport is the outcome of RunConverge.
type ConvergeReport struct {
	Date      string        `json:"date"`
	GoVersion string        `json:"goVersion"`
	CPUs      int           `json:"cpus"`
	Objects   int           `json:"objects"`
	Runs      []ConvergeRun `json:"runs"`
}

// ConvergeRun is one controller converging once.
type ConvergeRun struct {
	Kind    string  `json:"kind"`
	Setting Setting `json:"setting"`
	Run     int     `json:"run"`
	// Load is the 1-minute load average when the run began (/proc/loadavg).
	Load float64 `json:"load"`
	// CreateSeconds: first create sent → last create acknowledged.
	CreateSeconds float64 `json:"createSeconds"`
	// AllSeconds, P50Seconds, P90Seconds: first create sent → every, half,
	// 90% of the statuses seen Processed by the harness's watch.
	AllSeconds float64 `json:"allSeconds"`
	P50Seconds float64 `json:"p50Seconds"`
	P90Seconds float64 `json:"p90Seconds"`
	Processed  int     `json:"processed"`
	Converged  bool    `json:"converged"`
	// CPUSeconds: the CPU this process used from the first create to all
	// Processed: the controller's, plus the load generator's and the
	// harness's watch, which are the same whichever controller runs.
	CPUSeconds float64 `json:"cpuSeconds"`
	// Requests the controller sent from its start until it stopped, as its
	// transport counted them ("PUT myresources/status", "POST events",
	// "WATCH myresources", ...), and the answers by status code.
	Requests map[string]int `json:"requests"`
	Codes    map[int]int    `json:"codes"`
	// LastEventSeconds: first create → the controller's last Event write.
	LastEventSeconds float64 `json:"lastEventSeconds,omitempty"`
	// Curve: seconds since the first create → objects Processed (at most
	// 200 points).
	Curve [][2]float64 `json:"curve"`
}

// StatusWrites, EventWrites and OtherRequests split the run's requests.
func (r ConvergeRun) StatusWrites() int { return r.Requests["PUT myresources/status"] }
func (r ConvergeRun) EventWrites() int  { return r.Requests["POST events"] + r.Requests["PATCH events"] }
func (r ConvergeRun) OtherRequests() int {
	n := -r.StatusWrites() - r.EventWrites()
	for _, v := range r.Requests {
		n += v
	}
	return n
}

// RunConverge runs every kind at every setting, one controller at a time.
func RunConverge(ctx context.Context, opts ConvergeOptions) (*ConvergeReport, error) {
	opts.Objects = cmp.Or(opts.Objects, 1000)
	opts.Writers = cmp.Or(opts.Writers, 16)
	opts.Runs = cmp.Or(opts.Runs, 1)
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Minute
	}
	if len(opts.Kinds) == 0 {
		opts.Kinds = ConvergeKinds
	}
	if opts.Objects < 1 || opts.Runs < 1 || opts.Writers < 1 {
		return nil, errors.New("converge: objects, runs and writers must be at least 1")
	}
	for _, k := range opts.Kinds {
		if !slices.Contains(convergeKinds, k) {
			return nil, fmt.Errorf("converge: unknown kind %q (want %s)", k, strings.Join(convergeKinds, ", "))
		}
	}
	if len(opts.Settings) == 0 {
		return nil, errors.New("converge: no settings")
	}
	for _, s := range opts.Settings {
		if s.QPS <= 0 || s.Burst < 1 || s.Workers < 1 {
			return nil, fmt.Errorf("converge: setting %s: QPS must be above 0, burst and workers at least 1", s)
		}
		if _, err := myresource.ParseEventPolicy(string(s.Events)); err != nil {
			return nil, fmt.Errorf("converge: setting %s: %w", s, err)
		}
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if opts.CPUProfiles {
		if err := os.MkdirAll(opts.OutDir, 0o755); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(opts.Progress, "%6.1fs  "+format+"\n", append([]any{time.Since(start).Seconds()}, args...)...)
	}
	kubeconfig := opts.Kubeconfig
	if kubeconfig == "" {
		logf("starting a local control plane")
		cp, err := controlplane.Start(ctx, controlplane.Options{Logf: logf})
		if err != nil {
			return nil, err
		}
		defer cp.Stop()
		kubeconfig = cp.Kubeconfig
	}
	base, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	h := &convergeHarness{opts: opts, base: base, logf: logf}
	unlimited := rest.CopyConfig(base)
	unlimited.QPS, unlimited.Burst = -1, 0
	if h.kube, err = kubernetes.NewForConfig(unlimited); err != nil {
		return nil, err
	}
	if h.client, err = client.New(unlimited); err != nil {
		return nil, err
	}
	if err := h.warmUp(ctx); err != nil {
		return nil, err
	}
	r := &ConvergeReport{Date: time.Now().UTC().Format(time.RFC3339), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), Objects: opts.Objects}
	for run := range opts.Runs {
		for _, s := range opts.Settings {
			for _, kind := range opts.Kinds {
				if s.Defaults && kind != KindRaw {
					continue // the defaults are rawwatch's
				}
				res, err := h.run(ctx, kind, s, run)
				if res != nil {
					r.Runs = append(r.Runs, *res) // one that did not converge too
				}
				if err != nil {
					return r, fmt.Errorf("converge %s %s: %w", kind, s, err)
				}
			}
		}
	}
	return r, nil
}

type convergeHarness struct {
	opts   ConvergeOptions
	base   *rest.Config
	kube   kubernetes.Interface
	client *client.Client
	logf   func(string, ...any)
}

// run is one controller converging once in a namespace of its own.
func (h *convergeHarness) run(ctx context.Context, kind string, s Setting, run int) (*ConvergeRun, error) {
	res := &ConvergeRun{Kind: kind, Setting: s, Run: run, Load: loadAverage()}
	ns := fmt.Sprintf("converge-%s-%d", kind, time.Now().UnixNano())
	if _, err := h.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	defer h.clean(ns)

	counts := &transportCounts{}
	cfg := rest.CopyConfig(h.base)
	cfg.QPS, cfg.Burst = s.QPS, s.Burst
	cfg.Wrap(counts.wrap)
	cfg.UserAgent = "converge-" + kind
	ctrlCtx, stop := context.WithCancel(klog.NewContext(ctx, klog.Background().V(1)))
	synced := make(chan struct{})
	ended := make(chan error, 1)
	switch kind {
	case KindRaw:
		a, err := app.New(app.Options{Config: cfg, Namespace: ns, Workers: s.Workers, Events: s.Events})
		if err != nil {
			stop()
			return nil, err
		}
		go func() { ended <- a.Run(ctrlCtx) }()
		go func() {
			select {
			case <-a.Watcher.Synced():
				close(synced)
			case <-ctrlCtx.Done():
			}
		}()
	case KindInformer, KindInformerStripped:
		c, err := newInformerController(cfg, ns, s, kind == KindInformerStripped)
		if err != nil {
			stop()
			return nil, err
		}
		go func() { ended <- c.run(ctrlCtx, synced) }()
	case KindControllerRuntime:
		c, err := newCRController(cfg, ns, s)
		if err != nil {
			stop()
			return nil, err
		}
		go func() { ended <- c.run(ctrlCtx, synced) }()
	}
	stopped := false
	stopController := func() error {
		if stopped {
			return nil
		}
		stopped = true
		stop()
		select {
		case err := <-ended:
			return err
		case <-time.After(time.Minute):
			return errors.New("the controller did not stop within a minute")
		}
	}
	defer stopController()
	select {
	case <-synced:
	case err := <-ended:
		return nil, fmt.Errorf("controller ended before its first sync: %v", err)
	case <-time.After(time.Minute):
		return nil, errors.New("controller not synced after a minute")
	}

	w, err := h.watchProcessed(ctx, ns)
	if err != nil {
		return nil, err
	}
	h.logf("%s %s run %d: creating %d objects in %s (load %.2f)", kind, s, run+1, h.opts.Objects, ns, res.Load)
	load := &Load{Client: h.client, Namespace: ns, Writers: h.opts.Writers}
	if h.opts.CPUProfiles {
		name := fmt.Sprintf("%s-%s-%d.cpu.pprof", kind, strings.ReplaceAll(s.String(), "/", "-"), run+1)
		f, err := os.Create(filepath.Join(h.opts.OutDir, name))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	cpu0 := processCPU()
	t0 := time.Now()
	if _, err := load.Create(ctx, h.opts.Objects); err != nil {
		w.stop()
		return nil, err
	}
	res.CreateSeconds = time.Since(t0).Seconds()
	converged := w.wait(h.opts.Objects, h.opts.Timeout)
	res.CPUSeconds = processCPU() - cpu0
	w.stop()
	// Events are sent on their own goroutine: give the last ones a moment
	// to go out before counting (until no request for a second, at most 30 s).
	counts.settle(time.Second, 30*time.Second)
	if err := stopController(); err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	res.Requests, res.Codes = counts.snapshot()
	if last := counts.lastEvent(); !last.IsZero() {
		res.LastEventSeconds = last.Sub(t0).Seconds()
	}
	times := w.times()
	res.Processed, res.Converged = len(times), converged
	res.AllSeconds, res.P50Seconds, res.P90Seconds = quantileSeconds(times, t0, 1), quantileSeconds(times, t0, 0.5), quantileSeconds(times, t0, 0.9)
	res.Curve = curve(times, t0, 200)
	h.logf("%s %s run %d: %d/%d Processed in %.1fs (creates took %.1fs, %.1f CPU s); %d status writes, %d Event writes, %d other requests, %d answered 429",
		kind, s, run+1, res.Processed, h.opts.Objects, res.AllSeconds, res.CreateSeconds, res.CPUSeconds, res.StatusWrites(), res.EventWrites(), res.OtherRequests(), res.Codes[429])
	if !converged {
		return res, fmt.Errorf("%d of %d objects Processed after %s", len(times), h.opts.Objects, h.opts.Timeout)
	}
	return res, nil
}

// warmUp creates and deletes up to 1,000 objects with no controller
// running: the first writes to a fresh apiserver are slower (its caches,
// etcd's), and that should not count against the first run.
func (h *convergeHarness) warmUp(ctx context.Context) error {
	ns := fmt.Sprintf("converge-warmup-%d", time.Now().UnixNano())
	if _, err := h.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	defer h.clean(ns)
	n := min(h.opts.Objects, 1000)
	h.logf("warming up: %d creates with no controller", n)
	_, err := (&Load{Client: h.client, Namespace: ns, Writers: h.opts.Writers}).Create(ctx, n)
	return err
}

// clean deletes the run's objects, Events and namespace (the local control
// plane has no namespace controller to empty a deleted namespace).
func (h *convergeHarness) clean(ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	err := h.client.REST().Delete().Namespace(ns).Resource(v1alpha1.Resource).Do(ctx).Error()
	err = errors.Join(err, h.kube.CoreV1().Events(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}))
	err = errors.Join(err, h.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}))
	if err != nil {
		h.logf("cleaning %s: %v", ns, err)
	}
}

// quantileSeconds is the time from t0 until the q-th fraction of times.
func quantileSeconds(times []time.Time, t0 time.Time, q float64) float64 {
	if len(times) == 0 {
		return 0
	}
	i := min(len(times)-1, max(0, int(float64(len(times))*q+0.5)-1))
	return times[i].Sub(t0).Seconds()
}

// curve samples (seconds since t0, objects Processed by then) at most n times.
func curve(times []time.Time, t0 time.Time, n int) [][2]float64 {
	if len(times) == 0 {
		return nil
	}
	out := [][2]float64{{0, 0}}
	step := max(1, len(times)/n)
	for i := step - 1; i < len(times); i += step {
		out = append(out, [2]float64{times[i].Sub(t0).Seconds(), float64(i + 1)})
	}
	if last := len(times) - 1; (last+1)%step != 0 {
		out = append(out, [2]float64{times[last].Sub(t0).Seconds(), float64(last + 1)})
	}
	return out
}

// processCPU is the user and system CPU time this process used so far (s).
func processCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// ---- the harness's own watch: when each status first says Processed ----

type processedWatch struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	seen map[string]time.Time
	at   []time.Time // in order
	more chan struct{}
}

func (h *convergeHarness) watchProcessed(ctx context.Context, ns string) (*processedWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	p := &processedWatch{cancel: cancel, done: make(chan struct{}), seen: map[string]time.Time{}, more: make(chan struct{}, 1)}
	l, err := h.client.List(ctx, ns, metav1.ListOptions{})
	if err != nil {
		cancel()
		return nil, err
	}
	for i := range l.Items {
		p.observe(&l.Items[i])
	}
	go func() {
		defer close(p.done)
		rv := l.ResourceVersion
		for ctx.Err() == nil {
			var err error
			if rv, err = p.follow(ctx, h.client, ns, rv); err != nil && ctx.Err() == nil {
				// Expired, or the watch failed: start again from a list.
				if l, lerr := h.client.List(ctx, ns, metav1.ListOptions{}); lerr == nil {
					for i := range l.Items {
						p.observe(&l.Items[i])
					}
					rv = l.ResourceVersion
				}
			}
			// At most ten WATCHes a second, even from a server that ends
			// every watch at once without an error.
			sleep(ctx, 100*time.Millisecond)
		}
	}()
	return p, nil
}

// follow watches from rv until the watch ends; it returns the last
// resourceVersion seen.
func (p *processedWatch) follow(ctx context.Context, c *client.Client, ns, rv string) (string, error) {
	w, err := c.REST().Get().Namespace(ns).Resource(v1alpha1.Resource).
		VersionedParams(&metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}, metav1.ParameterCodec).
		Param("watch", "true").Watch(ctx)
	if err != nil {
		return rv, err
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			return rv, apierrors.FromObject(ev.Object)
		}
		o, ok := ev.Object.(*v1alpha1.MyResource)
		if !ok {
			continue
		}
		rv = o.ResourceVersion
		if ev.Type != watch.Bookmark {
			p.observe(o)
		}
	}
	return rv, nil
}

func (p *processedWatch) observe(o *v1alpha1.MyResource) {
	if o.Status.Phase != v1alpha1.PhaseProcessed {
		return
	}
	now := time.Now()
	key := store.KeyOf(o)
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.seen[key]; ok {
		return
	}
	p.seen[key] = now
	p.at = append(p.at, now)
	select {
	case p.more <- struct{}{}:
	default:
	}
}

// wait reports whether n objects were Processed within timeout.
func (p *processedWatch) wait(n int, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for {
		p.mu.Lock()
		got := len(p.at)
		p.mu.Unlock()
		if got >= n {
			return true
		}
		select {
		case <-p.more:
		case <-deadline:
			return false
		}
	}
}

func (p *processedWatch) stop() {
	p.cancel()
	<-p.done
}

func (p *processedWatch) times() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.at)
}
