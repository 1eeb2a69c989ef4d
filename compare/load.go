package compare

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/api/v1alpha1"
	"rawwatch/client"
	"rawwatch/store"
)

// Write is one acknowledged write of the load generator.
type Write struct {
	Op  byte   // EvAdd, EvUpdate or EvDelete
	Key string // namespace/name
	RV  string // the resourceVersion the server gave it ("" for deletes)
	Ack int64  // unix ns: the response arrived
}

// DefaultPayloadAnnotation holds the payload unless told otherwise: an
// annotation nobody reads, which every consumer keeps. Under
// kubectl.kubernetes.io/last-applied-configuration instead, the payload sits
// where kubectl's client-side apply keeps its copy of the object.
const DefaultPayloadAnnotation = "compare.example.com/payload"

// Which consumers drop myresource.UnreadAnnotations (Options.Transform).
const (
	TransformRaw  = "raw"
	TransformAll  = "all"
	TransformNone = "none"
)

// Load writes MyResources into one namespace with several writers in
// parallel. Each writer owns a fixed share of the keys, so writes never
// conflict and every key's writes are in order.
type Load struct {
	Client    *client.Client
	Namespace string
	Writers   int
	// Payload is the size of a filler annotation on every object (bytes):
	// real objects are bigger than a one-field spec. It goes under
	// PayloadAnnotation (default DefaultPayloadAnnotation).
	Payload           int
	PayloadAnnotation string
	// Apply writes with server-side apply (field manager "compare") instead
	// of create and update: the objects get the managedFields an applied
	// object has (every field the manager set, payload key included).
	Apply bool
	// Progress, if set, receives progress lines (a terminal bar).
	Progress io.Writer

	latest []*v1alpha1.MyResource // by index
	seq    atomic.Int64           // updates made, for unique messages
}

func (l *Load) name(i int) string { return fmt.Sprintf("obj-%06d", i) }

// run calls write(i) for i in [0, n) on l.Writers goroutines, writer w taking
// the indexes i with i % Writers == w, pacing all of them with lim (nil: as
// fast as the server answers), and collects the writes.
func (l *Load) run(ctx context.Context, label string, n int, lim *rate.Limiter, write func(ctx context.Context, i, seq int) (Write, error)) ([]Write, error) {
	writers := max(l.Writers, 1)
	results := make([][]Write, writers)
	var done atomic.Int64
	var firstErr error
	var errOnce sync.Once
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop, drawn := make(chan struct{}), make(chan struct{})
	go func() { l.progress(label, n, &done, stop); close(drawn) }()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i, seq := w, 0; i < n; i, seq = i+writers, seq+1 {
				if lim != nil && lim.Wait(ctx) != nil {
					return
				}
				wr, err := write(ctx, i, seq)
				if err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("%s %d: %w", label, i, err); cancel() })
					return
				}
				results[w] = append(results[w], wr)
				done.Add(1)
			}
		})
	}
	wg.Wait()
	close(stop)
	<-drawn
	var out []Write
	for _, r := range results {
		out = append(out, r...)
	}
	return out, firstErr
}

// Create creates n objects.
func (l *Load) Create(ctx context.Context, n int) ([]Write, error) {
	l.latest = make([]*v1alpha1.MyResource, n)
	payload := strings.Repeat("x", l.Payload)
	return l.run(ctx, "create", n, nil, func(ctx context.Context, i, _ int) (Write, error) {
		obj := &v1alpha1.MyResource{
			ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: l.name(i), Labels: map[string]string{"app": "compare"}},
			Spec:       v1alpha1.MyResourceSpec{Message: "created"},
		}
		if l.Payload > 0 {
			obj.Annotations = map[string]string{cmp.Or(l.PayloadAnnotation, DefaultPayloadAnnotation): payload}
		}
		got, err := l.write(ctx, obj, true)
		if err != nil {
			return Write{}, err
		}
		l.latest[i] = got
		return Write{Op: EvAdd, Key: store.KeyOf(got), RV: got.ResourceVersion, Ack: time.Now().UnixNano()}, nil
	})
}

// write creates or updates obj, or applies it (Apply).
func (l *Load) write(ctx context.Context, obj *v1alpha1.MyResource, create bool) (*v1alpha1.MyResource, error) {
	if !l.Apply {
		if create {
			return l.Client.Create(ctx, obj)
		}
		return l.Client.Update(ctx, obj)
	}
	// The applied configuration: what this manager wants, nothing the server
	// owns (no resourceVersion, no status).
	cfg := &v1alpha1.MyResource{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.Kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: obj.Namespace, Name: obj.Name, Labels: obj.Labels, Annotations: obj.Annotations},
		Spec:       obj.Spec,
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	return l.Client.Apply(ctx, obj.Namespace, obj.Name, "compare", data)
}

// Update makes updates spread round-robin over the created objects, at most
// qps per second (0: as fast as the server answers), for d, or n updates if
// n > 0.
func (l *Load) Update(ctx context.Context, qps float64, d time.Duration, n int) ([]Write, error) {
	var lim *rate.Limiter
	if qps > 0 {
		lim = rate.NewLimiter(rate.Limit(qps), max(1, int(qps/10)))
	}
	if n == 0 {
		n = 1 << 30
		if qps > 0 {
			n = int(qps * d.Seconds())
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	objs := len(l.latest)
	writes, err := l.run(ctx, "update", n, lim, func(ctx context.Context, i, _ int) (Write, error) {
		obj := l.latest[i%objs].DeepCopy()
		// Every update must change the object: the apiserver answers an
		// update that changes nothing without a new resourceVersion or event.
		obj.Spec.Message = fmt.Sprintf("update %d", l.seq.Add(1))
		got, err := l.write(ctx, obj, false)
		if err != nil {
			return Write{}, err
		}
		l.latest[i%objs] = got
		return Write{Op: EvUpdate, Key: store.KeyOf(got), RV: got.ResourceVersion, Ack: time.Now().UnixNano()}, nil
	})
	if ctx.Err() != nil { // the phase's time is up: not an error
		err = nil
	}
	return writes, err
}

// Delete deletes the first n objects.
func (l *Load) Delete(ctx context.Context, n int) ([]Write, error) {
	return l.run(ctx, "delete", n, nil, func(ctx context.Context, i, _ int) (Write, error) {
		if err := l.Client.Delete(ctx, l.Namespace, l.name(i), metav1.DeleteOptions{}); err != nil {
			return Write{}, err
		}
		return Write{Op: EvDelete, Key: store.Key(l.Namespace, l.name(i)), Ack: time.Now().UnixNano()}, nil
	})
}

// progress draws a bar until stop is closed.
func (l *Load) progress(label string, total int, done *atomic.Int64, stop <-chan struct{}) {
	if l.Progress == nil {
		return
	}
	// A bar redrawn in place on a terminal; elsewhere (a log file, CI) a
	// line every 5 seconds.
	tty := isTerminal(l.Progress)
	every := 5 * time.Second
	if tty {
		every = 250 * time.Millisecond
	}
	start := time.Now()
	t := time.NewTicker(every)
	defer t.Stop()
	draw := func(final bool) {
		n := int(done.Load())
		rate := float64(n) / max(time.Since(start).Seconds(), 1e-3)
		line := fmt.Sprintf("%-7s %d writes, %.0f/s", label, n, rate)
		if total < 1<<30 {
			width := 30
			filled := min(width, n*width/max(total, 1))
			line = fmt.Sprintf("%-7s [%s%s] %d/%d, %.0f/s", label, strings.Repeat("=", filled), strings.Repeat(" ", width-filled), n, total, rate)
		}
		switch {
		case !tty:
			fmt.Fprintf(l.Progress, "        %s\n", line)
		case final:
			fmt.Fprintf(l.Progress, "\r%s\n", line)
		default:
			fmt.Fprintf(l.Progress, "\r%s", line)
		}
	}
	for {
		select {
		case <-stop:
			draw(true)
			return
		case <-t.C:
			draw(false)
		}
	}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	if lw, ok := w.(*lockedWriter); ok {
		w = lw.w
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
