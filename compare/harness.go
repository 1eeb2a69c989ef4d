package compare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"rawwatch/codec"
	"rawwatch/reconcile/myresource"
	"rawwatch/store"
)

// Options configure a comparison run.
type Options struct {
	// Kubeconfig points at the server to use; "" starts a local control plane.
	Kubeconfig string
	// Objects is N, the number of objects created before the consumers start.
	Objects int
	// UpdateRate is the target of the update phase (updates per second; 0 =
	// as fast as the server takes them), UpdateDuration its length.
	UpdateRate     float64
	UpdateDuration time.Duration
	// DeleteFraction of the objects is deleted in the last phase (the rest
	// stays, so the final caches can be compared with the server).
	DeleteFraction float64
	// Relist forces a relist with N objects present, by restarting the
	// apiserver: RestartAPIServer does it (set by Run when it starts the
	// local control plane itself; without it there is no relist phase).
	Relist           bool
	RestartAPIServer func(context.Context) error
	// APIServerPID, if set, gives the running apiserver's process id, for
	// the kernel's peak of its resident set in the cost windows (set by Run
	// with the local control plane).
	APIServerPID func() int
	// Kinds are the consumers to run (default AllKinds).
	Kinds []string
	// CostKinds are the consumers first run alone, one after the other, to
	// measure what each costs the apiserver (alone.go; none by default;
	// only with RestartAPIServer). IdleFor is how long the idle apiserver
	// is sampled before each measurement (default 2 s).
	CostKinds []string
	IdleFor   time.Duration
	// Writers is the load generator's parallelism; Payload an annotation
	// size added to every object (bytes), under PayloadAnnotation (default
	// DefaultPayloadAnnotation).
	Writers, Payload  int
	PayloadAnnotation string
	// Transform says which consumers drop the annotations rawwatch's
	// reconciler never reads (myresource.UnreadAnnotations) from their cache:
	// TransformRaw (the default: the raw consumers, as rawwatch does out of
	// the box, and informer-stripped, the careful user's informer; a plain
	// informer keeps whatever it is given unless its user sets a transform),
	// TransformAll (every informer and controller-runtime's cache too), or
	// TransformNone.
	Transform string
	// Apply writes the objects with server-side apply, so that they carry
	// the managedFields real objects carry (the fields each manager owns).
	Apply bool
	// OutDir receives events, results and the report.
	OutDir string
	// Binary runs "BINARY consume ..." for each consumer (default: this executable).
	Binary string
	// Break makes a consumer lose every n-th watch frame (kind → n), to
	// prove that the verdict catches a broken consumer.
	Break map[string]int
	// Profile makes every consumer write a heap profile at each phase end.
	Profile bool
	// Wire is the encoding the consumers ask for (default JSON). With CBOR
	// the local control plane starts with CBORServingAndStorage on (another
	// cluster needs it too), and each kind that can ask (CanAsk) does; the
	// others read JSON. The report says what each one read (ConsumerReport.Wire).
	Wire codec.Wire
	// Progress receives progress bars and phase lines (optional).
	Progress io.Writer
}

// Phase is a named time span of the run.
type Phase struct {
	Name       string  `json:"name"`
	Start, End int64   `json:"-"`
	StartS     float64 `json:"start"` // seconds since the run began
	EndS       float64 `json:"end"`
}

// Run performs a whole comparison and returns its report.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if opts.Objects <= 0 {
		return nil, errors.New("compare: Objects must be positive")
	}
	if len(opts.Kinds) == 0 {
		opts.Kinds = AllKinds
	}
	if opts.Writers == 0 {
		opts.Writers = 16
	}
	if opts.PayloadAnnotation == "" {
		opts.PayloadAnnotation = DefaultPayloadAnnotation
	}
	switch opts.Transform {
	case "":
		opts.Transform = TransformRaw
	case TransformRaw, TransformAll, TransformNone:
	default:
		return nil, fmt.Errorf("compare: Transform %q: want %s, %s or %s", opts.Transform, TransformRaw, TransformAll, TransformNone)
	}
	var err error
	if opts.Wire, err = codec.ParseWire(string(opts.Wire)); err != nil {
		return nil, fmt.Errorf("compare: %w", err)
	}
	if err := outputs(&opts.Binary, &opts.Progress, opts.OutDir); err != nil {
		return nil, err
	}
	h := &harness{bench: bench{progress: opts.Progress, start: time.Now()}, opts: opts}
	defer h.cleanup()
	if err := h.connect(ctx); err != nil {
		return nil, err
	}
	if err := h.run(ctx); err != nil {
		return nil, err
	}
	return h.report()
}

type harness struct {
	bench
	opts      Options
	cfg       *rest.Config
	load      *Load
	consumers []*child
	phases    []Phase
	writes    []Write
	serverRVs map[string]string
	relisted  bool
	costs     []APIServerCost
}

func (h *harness) phase(name string, f func() error) error {
	h.logf("phase %s", name)
	p := Phase{Name: name, Start: time.Now().UnixNano()}
	err := f()
	p.End = time.Now().UnixNano()
	h.phases = append(h.phases, p)
	return err
}

func (h *harness) connect(ctx context.Context) error {
	cfg, err := h.bench.connect(ctx, h.opts.Kubeconfig, h.opts.Wire == codec.WireCBOR, fmt.Sprintf("compare-%d", time.Now().Unix()))
	if h.cp != nil {
		h.opts.RestartAPIServer, h.opts.APIServerPID = h.cp.APIServer.Restart, h.cp.APIServer.PID
	}
	if err != nil {
		return err
	}
	h.cfg = cfg
	h.load = &Load{Client: h.client, Namespace: h.namespace, Writers: h.opts.Writers, Payload: h.opts.Payload, PayloadAnnotation: h.opts.PayloadAnnotation, Apply: h.opts.Apply, Progress: h.opts.Progress}
	return nil
}

func (h *harness) cleanup() {
	for _, c := range h.consumers {
		c.kill()
	}
	h.bench.cleanup()
}

func (h *harness) run(ctx context.Context) error {
	n := h.opts.Objects
	err := h.phase("create", func() error {
		w, err := h.load.Create(ctx, n)
		h.writes = append(h.writes, w...)
		return err
	})
	if err != nil {
		return err
	}
	if len(h.opts.CostKinds) > 0 && h.opts.RestartAPIServer != nil {
		if err := h.phase("apiserver-cost", func() error { return h.measureCosts(ctx) }); err != nil {
			return err
		}
	} else if len(h.opts.CostKinds) > 0 {
		h.logf("no apiserver cost per consumer: no way to restart the apiserver")
	}
	err = h.phase("sync", func() error {
		for _, kind := range h.opts.Kinds {
			c, err := h.spawn(kind, kind)
			if err != nil {
				return err
			}
			h.consumers = append(h.consumers, c)
		}
		// An initial sync hands out nothing until a whole response is in
		// (one unpaginated LIST of every object, for an informer): quiet
		// for a while is not stuck here.
		h.waitEach(10*time.Minute, syncQuietPeriod, "initial sync", func(_ *child, s status) bool { return s.synced })
		for _, c := range h.consumers {
			if !c.status().synced {
				return fmt.Errorf("consumer %s did not sync\n%s", c.kind, c.stderrTail())
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	h.mark("after-sync")

	var updates []Write
	err = h.phase("update", func() error {
		var err error
		updates, err = h.load.Update(ctx, h.opts.UpdateRate, h.opts.UpdateDuration, 0)
		h.writes = append(h.writes, updates...)
		return err
	})
	if err != nil {
		return err
	}
	h.logf("%d updates written (%.0f/s)", len(updates), float64(len(updates))/h.opts.UpdateDuration.Seconds())
	h.waitAll(2*time.Minute, "update delivery", func(s status) bool { return s.updates >= int64(len(updates)) })
	h.mark("after-updates")

	if h.opts.Relist && h.opts.RestartAPIServer != nil {
		before := map[*child]status{}
		for _, c := range h.consumers {
			before[c] = c.status()
		}
		err = h.phase("relist", func() error {
			// A restarted apiserver's watch cache starts at the current
			// revision, and a watch from an older one gets 410 Gone. The
			// consumers are at the revision of their last event; writes
			// elsewhere move the current revision past it.
			if err := bumpRevision(ctx, h.kube); err != nil {
				return err
			}
			if err := h.opts.RestartAPIServer(ctx); err != nil {
				return err
			}
			// A consumer has recovered when it has finished a relist and
			// delivers a write made after it: it watches again. A relist
			// can take a while to start (the backoff grown while the
			// apiserver was away, up to 30 s in client-go).
			if err := h.waitEach(2*time.Minute, 45*time.Second, "relist", func(c *child, s status) bool { return relisted(c.kind, before[c], s, n) }); err != nil {
				return err
			}
			// A consumer's first WATCH after its relist may still wait for
			// the new apiserver's watch cache (429 "storage is
			// (re)initializing"): one probe update a second, until every
			// consumer has delivered one.
			probeBefore := map[*child]int64{}
			for _, c := range h.consumers {
				probeBefore[c] = c.status().updates
			}
			recovered := func(c *child, s status) bool { return s.updates > probeBefore[c] }
			for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
				probe, err := h.load.Update(ctx, 0, 0, 1)
				if err != nil {
					return err
				}
				h.writes = append(h.writes, probe...)
				for wait := time.Now().Add(time.Second); time.Now().Before(wait); time.Sleep(50 * time.Millisecond) {
					if h.allOf(recovered) {
						return nil
					}
				}
			}
			var late []string
			for _, c := range h.consumers {
				if !recovered(c, c.status()) {
					late = append(late, c.kind)
				}
			}
			h.logf("relist recovery: timed out: %s", strings.Join(late, ", "))
			return nil
		})
		if err != nil {
			return err
		}
		h.relisted = true
		h.mark("after-relist")
	}

	del := int(float64(n) * h.opts.DeleteFraction)
	err = h.phase("delete", func() error {
		w, err := h.load.Delete(ctx, del)
		h.writes = append(h.writes, w...)
		return err
	})
	if err != nil {
		return err
	}
	h.waitAll(2*time.Minute, "delete delivery", func(s status) bool {
		return s.deletes >= int64(del) && (s.storeLen < 0 || s.storeLen == n-del)
	})
	list, err := h.client.List(ctx, h.namespace, metav1.ListOptions{})
	if err != nil {
		return err
	}
	h.serverRVs = map[string]string{}
	for i := range list.Items {
		h.serverRVs[store.KeyOf(&list.Items[i])] = list.Items[i].ResourceVersion
	}
	for _, c := range h.consumers {
		c.stop()
	}
	for _, c := range h.consumers {
		if err := c.wait(time.Minute); err != nil {
			return fmt.Errorf("consumer %s: %w", c.kind, err)
		}
	}
	return nil
}

// bumpRevision writes a few objects in a namespace no consumer watches: a
// restarted apiserver's watch cache starts at the current revision, and a
// watch from the consumers' older revision then gets 410 Gone: they must
// relist.
func bumpRevision(ctx context.Context, kube kubernetes.Interface) error {
	for i := range 3 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", GenerateName: "compare-bump-"},
			Data: map[string]string{"i": strconv.Itoa(i)}}
		if _, err := kube.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

func (h *harness) mark(label string) {
	for _, c := range h.consumers {
		c.send("mark " + label)
	}
	h.waitAll(time.Minute, "mark "+label, func(s status) bool { return s.marked[label] })
}

// waitAll waits until every consumer's status satisfies ok. A consumer that
// stops making progress for quietPeriod is not waited for any longer (a
// broken consumer must not stall the run: its verdict will show what it
// missed); neither is anyone after timeout. Only a consumer that exited is
// an error.
func (h *harness) waitAll(timeout time.Duration, what string, ok func(status) bool) error {
	return h.waitEach(timeout, quietPeriod, what, func(_ *child, s status) bool { return ok(s) })
}

const quietPeriod = 5 * time.Second

// syncQuietPeriod is quietPeriod for the initial sync: 10,000 objects of 16
// KiB are a 160 MiB LIST response, which an informer decodes whole before
// its first handler call (about 10 s on two cores).
const syncQuietPeriod = time.Minute

// allOf says whether every consumer's status satisfies ok now.
func (h *harness) allOf(ok func(*child, status) bool) bool {
	for _, c := range h.consumers {
		if !ok(c, c.status()) {
			return false
		}
	}
	return true
}

// relisted says whether a consumer finished a relist of n objects since
// status before. Each kind shows it its own way: the raw watcher counts its
// completed lists; an informer's relist reports every object again as an
// update with an unchanged resourceVersion; the bare stream's as an ADDED.
func relisted(kind string, before, now status, n int) bool {
	switch {
	case now.doneLists >= 0:
		return now.doneLists > before.doneLists
	case kind == KindBare:
		return now.adds-before.adds >= int64(n)
	default:
		return now.resyncs+now.updates-before.resyncs-before.updates >= int64(n)
	}
}

func (h *harness) waitEach(timeout, quiet time.Duration, what string, ok func(*child, status) bool) error {
	deadline := time.Now().Add(timeout)
	last := map[*child]status{}
	moved := map[*child]time.Time{}
	for {
		var late, quietKinds []string
		for _, c := range h.consumers {
			s := c.status()
			if err := c.exited(); err != nil {
				return fmt.Errorf("consumer %s exited during %s: %v\n%s", c.kind, what, err, c.stderrTail())
			}
			if ok(c, s) {
				continue
			}
			if p, seen := last[c]; !seen || p.progress() != s.progress() {
				last[c], moved[c] = s, time.Now()
			}
			if time.Since(moved[c]) > quiet {
				quietKinds = append(quietKinds, c.kind)
				continue
			}
			late = append(late, c.kind)
		}
		if len(late) == 0 {
			if len(quietKinds) > 0 {
				h.logf("%s: %s made no progress for %s; going on without them", what, strings.Join(quietKinds, ", "), quiet)
			}
			return nil
		}
		if time.Now().After(deadline) {
			h.logf("timed out waiting for %s: %s", what, strings.Join(late, ", "))
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ---- a consumer process ----

type child struct {
	*consumerProcess
	kind                   string
	eventsPath, resultPath string
	wire                   codec.Wire // what it asks for

	mu sync.Mutex
	st status
}

type status struct {
	synced                          bool
	adds, updates, deletes, resyncs int64
	storeLen                        int
	lists, pages, doneLists         int64
	bytesRead, wireBytes            int64
	marked                          map[string]bool
}

// spawn starts a consumer of kind; its files in OutDir are named name.*.
func (h *harness) spawn(kind, name string) (*child, error) {
	c := &child{
		kind:       kind,
		eventsPath: filepath.Join(h.opts.OutDir, name+".events"),
		resultPath: filepath.Join(h.opts.OutDir, name+".json"),
		st:         status{marked: map[string]bool{}},
	}
	args := []string{"consume", "--kind", kind, "--kubeconfig", h.kubeconfig, "--namespace", h.namespace,
		"--events", c.eventsPath, "--result", c.resultPath}
	if n := h.opts.Break[kind]; n > 0 {
		args = append(args, "--drop-every", strconv.Itoa(n))
	}
	if h.opts.Profile {
		args = append(args, "--profile-dir", h.opts.OutDir)
	}
	if trims(h.opts.Transform, kind) {
		args = append(args, "--drop-annotations", strings.Join(myresource.UnreadAnnotations, ","))
	}
	wire := h.opts.Wire
	if !CanAsk(kind, wire) {
		wire = codec.WireJSON
	}
	args = append(args, "--wire", string(wire))
	c.wire = wire
	var err error
	c.consumerProcess, err = startConsumer(h.opts.Binary, args, kind, wire, filepath.Join(h.opts.OutDir, name+".log"), c.line)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// trims says whether a consumer of kind drops the annotations rawwatch's
// reconciler never reads, under transform: with TransformRaw the raw
// consumers do, and so does informer-stripped, the informer set up as a
// careful user sets it up (it trims what the raw store trims).
func trims(transform, kind string) bool {
	switch transform {
	case TransformAll:
		return true
	case TransformRaw:
		return strings.HasPrefix(kind, KindRaw) || kind == KindInformerStripped
	}
	return false
}

// line takes one line of the consumer's status protocol (RunConsumer).
func (c *child) line(f []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch f[0] {
	case "synced":
		c.st.synced = true
	case "marked":
		if len(f) > 1 {
			c.st.marked[f[1]] = true
		}
	case "status":
		if len(f) == 11 {
			v := make([]int64, 10)
			for i := range v {
				v[i], _ = strconv.ParseInt(f[i+1], 10, 64)
			}
			c.st.adds, c.st.updates, c.st.deletes, c.st.resyncs = v[0], v[1], v[2], v[3]
			c.st.storeLen, c.st.lists, c.st.pages, c.st.doneLists = int(v[4]), v[5], v[6], v[7]
			c.st.bytesRead, c.st.wireBytes = v[8], v[9]
		}
	}
}

// progress is what changes while a consumer works.
func (s status) progress() [8]int64 {
	return [8]int64{s.adds, s.updates, s.deletes, s.resyncs, int64(s.storeLen), s.lists, s.pages, s.doneLists}
}

func (c *child) status() status {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.st
	s.marked = map[string]bool{}
	for k, v := range c.st.marked {
		s.marked[k] = v
	}
	return s
}

func (c *child) stop() { c.send("stop") }

// outputs fills in what a run of consumer processes (the harness's, the
// storm's) defaults alike: the consumers' binary (this executable), a
// progress writer several goroutines may share, and the output directory.
func outputs(binary *string, progress *io.Writer, outDir string) error {
	if *binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		*binary = exe
	}
	if *progress == nil {
		*progress = io.Discard
	}
	*progress = &lockedWriter{w: *progress}
	return os.MkdirAll(outDir, 0o755)
}

// lockedWriter serialises the lines several goroutines write to one writer:
// the progress of the harness and the load generator, a consumer's protocol.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
