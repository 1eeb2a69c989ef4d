package watcher

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"rawwatch/store"
)

// Options tune a Watcher. The zero value of every field means its default.
type Options[T Object] struct {
	// PageSize is the LIST page size (limit); default 500, as client-go's pager.
	PageSize int64
	// WatchTimeoutMin/Max bound the timeoutSeconds of each WATCH, chosen at
	// random between them so that many clients do not reconnect in step.
	// Default 5 and 10 minutes, as client-go's Reflector.
	WatchTimeoutMin, WatchTimeoutMax time.Duration
	// NewBackoff makes the retry backoff. Default: exponential from 800 ms,
	// doubling, capped at 30 s, ±50% jitter, never giving up.
	NewBackoff func() backoff.BackOff
	// Handler is called, on the loop's goroutine, for every change applied to
	// the store, after the store was updated. It must not block (enqueue a key).
	Handler func(store.Delta[T])
	// Observer hears about every step of the loop (optional).
	Observer Observer
	// Codec decodes objects; set its GVK to reject objects of another kind.
	Codec Codec[T]
	// Logger defaults to klog's global logger.
	Logger klog.Logger
	// WatchList makes the watcher get its initial state from a WATCH with
	// sendInitialEvents=true instead of a paginated LIST (KEP-3157): the
	// server streams the objects one by one, ends them with a bookmark
	// annotated k8s.io/initial-events-end, and the same stream goes on with
	// live events. If the server refuses it, the watcher falls back to LIST.
	WatchList bool
}

// DefaultBackoff is the retry backoff used when Options.NewBackoff is nil:
// the delays client-go's Reflector uses (800 ms doubling to a 30 s cap).
func DefaultBackoff() backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 800 * time.Millisecond
	b.Multiplier = 2
	b.RandomizationFactor = 0.5
	b.MaxInterval = 30 * time.Second
	b.MaxElapsedTime = 0 // never stop
	b.Reset()
	return b
}

// Watcher keeps a Store in step with one resource on the API server by
// listing it, then watching it from the list's resourceVersion, forever.
type Watcher[T Object] struct {
	source Source
	store  *store.Store[T]
	opts   Options[T]
	log    klog.Logger
	stats  Stats
	obs    Observer

	rv         atomic.Pointer[string]
	synced     chan struct{}
	syncedOnce sync.Once
}

// New returns a watcher that fills s from src. Call Run to start it.
func New[T Object](src Source, s *store.Store[T], opts Options[T]) *Watcher[T] {
	if opts.PageSize == 0 {
		opts.PageSize = 500
	}
	if opts.WatchTimeoutMin == 0 {
		opts.WatchTimeoutMin = 5 * time.Minute
	}
	if opts.WatchTimeoutMax < opts.WatchTimeoutMin {
		opts.WatchTimeoutMax = 2 * opts.WatchTimeoutMin
	}
	if opts.NewBackoff == nil {
		opts.NewBackoff = DefaultBackoff
	}
	if opts.Handler == nil {
		opts.Handler = func(store.Delta[T]) {}
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = klog.Background()
	}
	w := &Watcher[T]{source: src, store: s, opts: opts, log: opts.Logger, synced: make(chan struct{})}
	w.obs = Observers{&w.stats}
	if opts.Observer != nil {
		w.obs = Observers{&w.stats, opts.Observer}
	}
	empty := ""
	w.rv.Store(&empty)
	return w
}

// Synced is closed once the first list is in the store.
func (w *Watcher[T]) Synced() <-chan struct{} { return w.synced }

// ResourceVersion is the last resourceVersion the store is synced to.
func (w *Watcher[T]) ResourceVersion() string { return *w.rv.Load() }

// Stats returns the loop's counters.
func (w *Watcher[T]) Stats() StatsSnapshot { return w.stats.Snapshot() }

// Run drives the state machine until ctx ends. It only returns then: every
// failure is retried.
func (w *Watcher[T]) Run(ctx context.Context) {
	m := Machine{State: Listing, WatchList: w.opts.WatchList}
	bo := w.opts.NewBackoff()
	var last Next
	// open is a stream a WatchList left open after its initial events: the
	// next Watching step carries on reading it instead of making a request.
	var open *stream[T]
	defer func() {
		if open != nil { // stopped between the initial events and the Watching step
			open.close()
		}
	}()
	for {
		from := m.State
		var o Outcome
		switch m.State {
		case Stopped:
			return
		case Listing, Relisting:
			if m.WatchList {
				o, open = w.watchList(ctx, m.ListRV())
			} else {
				o = w.list(ctx, m.ListRV())
			}
		case Watching:
			if open != nil {
				o, open = w.drain(open), nil
			} else {
				o = w.watch(ctx, m.RV)
			}
		case BackingOff:
			delay := max(bo.NextBackOff(), last.MinDelay)
			w.obs.BackingOff(delay, last.Class)
			w.log.V(4).Info("Backing off", "delay", delay)
			select {
			case <-ctx.Done():
				m.State = Stopped
			case <-time.After(delay):
				m.BackoffDone()
			}
			w.obs.StateChanged(from, m.State, "waited "+delay.Round(time.Millisecond).String())
			continue
		}
		if ctx.Err() != nil {
			o.Err = context.Canceled
		}
		last = m.Step(o)
		if last.ResetBackoff {
			bo.Reset()
		}
		w.setRV(m.RV)
		w.logStep(from, m.State, last)
		w.obs.StateChanged(from, m.State, last.Reason)
	}
}

// logStep logs a transition: failures that make the loop wait at the default
// level (a user must see why nothing happens), a relist at the default level
// (it is expensive and rare), everything else at -v=3.
func (w *Watcher[T]) logStep(from, to State, next Next) {
	switch {
	case next.Class == Denied:
		w.log.Error(next.Err, "Access denied: check the credentials and the RBAC rules (this controller needs list and watch); backing off", "after", from)
	case to == BackingOff && next.Err != nil:
		w.log.Error(next.Err, "Request failed; backing off", "after", from, "class", next.Class)
	case to == BackingOff:
		w.log.Info("Backing off", "after", from, "reason", next.Reason)
	case to == Relisting:
		w.log.Info("Relisting", "reason", next.Reason)
	default:
		w.log.V(3).Info("State change", "from", from, "to", to, "reason", next.Reason)
	}
}

func (w *Watcher[T]) setRV(rv string) { w.rv.Store(&rv) }

// list reads every page into a Replacement and swaps it into the store.
// Continue pages carry only the token: the server serves them from the
// snapshot the first page was read at, and refuses the token (410 Expired)
// once etcd has compacted that snapshot, which sends us back to page one.
func (w *Watcher[T]) list(ctx context.Context, rv string) Outcome {
	repl := w.store.NewReplacement()
	opts := metav1.ListOptions{ResourceVersion: rv, Limit: w.opts.PageSize}
	for page := 1; ; page++ {
		body, err := w.source.List(ctx, opts)
		if err != nil {
			return Outcome{Op: OpList, Err: err}
		}
		items := 0
		meta, err := decodeList(body, w.opts.Codec,
			func(obj T) { items++; repl.Add(obj) },
			func(skip *SkipError) {
				if skip.Key != "" {
					repl.Keep(skip.Key)
				}
				w.skipped(skip)
			})
		body.Close()
		if err != nil {
			return Outcome{Op: OpList, Err: err}
		}
		w.obs.ListPage(page, items, meta.Continue, meta.ResourceVersion)
		if meta.Continue == "" {
			rv = meta.ResourceVersion
			break
		}
		opts = metav1.ListOptions{Limit: w.opts.PageSize, Continue: meta.Continue}
	}
	w.commit(repl, rv)
	return Outcome{Op: OpList, RV: rv}
}

// commit swaps a finished (re)list into the store and hands out its deltas.
func (w *Watcher[T]) commit(repl *store.Replacement[T], rv string) {
	size := repl.Len()
	deltas := repl.Commit()
	var added, updated, deleted int
	for _, d := range deltas {
		switch d.Type {
		case store.Added:
			added++
		case store.Updated:
			updated++
		case store.Deleted:
			deleted++
		}
	}
	w.setRV(rv)
	w.obs.Replaced(rv, size, added, updated, deleted)
	for _, d := range deltas {
		w.opts.Handler(d)
	}
	w.syncedOnce.Do(func() { close(w.synced) })
}

// stream is an open WATCH response.
type stream[T Object] struct {
	body   io.ReadCloser
	dec    *eventDecoder[T]
	cancel context.CancelFunc
	start  time.Time
}

// open starts a WATCH with opts (resourceVersion and any WatchList fields
// set by the caller), adding bookmarks and a jittered timeout.
func (w *Watcher[T]) open(ctx context.Context, opts metav1.ListOptions) (*stream[T], error) {
	timeout := w.watchTimeout()
	secs := int64(timeout / time.Second)
	opts.AllowWatchBookmarks, opts.TimeoutSeconds = true, &secs
	// The server ends the stream after timeoutSeconds; the deadline is a
	// backstop for a server that went silent without closing the connection.
	wctx, cancel := context.WithTimeout(ctx, timeout+time.Minute)
	w.obs.WatchStarted(opts.ResourceVersion, timeout, opts.SendInitialEvents != nil)
	start := time.Now()
	body, err := w.source.Watch(wctx, opts)
	if err != nil {
		cancel()
		return nil, err
	}
	return &stream[T]{body: body, dec: newEventDecoder(body, w.opts.Codec), cancel: cancel, start: start}, nil
}

func (s *stream[T]) close() {
	s.body.Close()
	s.cancel()
}

// watch opens one WATCH from rv and applies its events until it ends.
func (w *Watcher[T]) watch(ctx context.Context, rv string) Outcome {
	s, err := w.open(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		return Outcome{Op: OpWatch, Err: err}
	}
	return w.drain(s)
}

// drain applies a stream's events to the store until it ends, and closes it.
func (w *Watcher[T]) drain(s *stream[T]) Outcome {
	defer s.close()
	o := w.consume(s.dec)
	o.Duration = time.Since(s.start)
	w.obs.WatchEnded(o.Events, o.Duration, o.Err)
	return o
}

func (w *Watcher[T]) watchTimeout() time.Duration {
	lo, hi := w.opts.WatchTimeoutMin, w.opts.WatchTimeoutMax
	d := lo
	if hi > lo {
		d += rand.N(hi - lo)
	}
	return max(d.Truncate(time.Second), time.Second)
}

// consume applies events from one stream to the store until the stream ends.
func (w *Watcher[T]) consume(dec *eventDecoder[T]) Outcome {
	o := Outcome{Op: OpWatch}
	for {
		ev, err := dec.Next()
		var skip *SkipError
		switch {
		case errors.Is(err, io.EOF):
			return o
		case errors.As(err, &skip):
			w.skipped(skip)
			if ev.Type == Deleted && skip.Key != "" {
				// We cannot read the final state, but we know the key is gone.
				if d, known := w.store.DeleteKey(skip.Key, *new(T)); known {
					w.opts.Handler(d)
				}
			}
			continue
		case err != nil:
			o.Err = err
			return o
		}
		switch ev.Type {
		case Error:
			o.Err, o.ErrorEvent = ev.Err, true
			return o
		case Bookmark:
			w.obs.BookmarkReceived(ev.RV, ev.InitialEventsEnd)
		default:
			w.apply(ev)
		}
		o.Events++
		o.RV = ev.RV
		w.setRV(ev.RV)
	}
}

// apply writes one event to the store and hands the delta to the handler.
func (w *Watcher[T]) apply(ev Event[T]) {
	var d store.Delta[T]
	var changed bool
	if ev.Type == Deleted {
		d, changed = w.store.Delete(ev.Object)
	} else {
		d, changed = w.store.Upsert(ev.Object)
	}
	w.obs.EventReceived(ev.Type, store.KeyOf(ev.Object), ev.RV)
	if changed {
		w.opts.Handler(d)
	}
}

func (w *Watcher[T]) skipped(err *SkipError) {
	w.log.Error(err, "Skipping an object that cannot be decoded")
	w.obs.Skipped(err)
}
