package watcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"rawwatch/observe"
	"rawwatch/store"
)

// Defaults of Options, named once: flags, wiring and docs use these.
const (
	// DefaultPageSize is the LIST page size: client-go's pager's.
	DefaultPageSize = 500
	// DefaultWatchTimeoutMin is the shortest timeoutSeconds a WATCH asks for;
	// the longest is twice that (client-go's Reflector: 5 to 10 minutes).
	DefaultWatchTimeoutMin = 5 * time.Minute
	// DefaultSilenceLimit is how long a WATCH may send nothing, not even a
	// bookmark, before the watchdog abandons it: one lost bookmark.
	DefaultSilenceLimit = 150 * time.Second
)

// ErrSilent ends a WATCH the watchdog abandoned (Options.SilenceLimit).
var ErrSilent = errors.New("watch sent nothing, not even a bookmark, for longer than the silence limit")

// Options tune a Watcher. The zero value of every field means its default.
type Options[T Object] struct {
	// PageSize is the LIST page size (limit); default DefaultPageSize.
	PageSize int64
	// WatchTimeoutMin/Max bound the timeoutSeconds of each WATCH, drawn at
	// random so that clients do not reconnect in step (default
	// DefaultWatchTimeoutMin and twice that).
	WatchTimeoutMin, WatchTimeoutMax time.Duration
	// Backoff is the retry policy; default DefaultBackoff.
	Backoff Backoff
	// SilenceLimit: a WATCH silent this long is abandoned; default DefaultSilenceLimit.
	SilenceLimit time.Duration
	// Rand returns numbers in [0, 1) for the jitters; default math/rand/v2's.
	Rand func() float64
	// Handler is called, on the loop's goroutine, for every change applied to
	// the store, after the store was updated. It must not block (enqueue a key).
	Handler func(store.Delta[T])
	// Observer hears the events of this package (StateChanged, ...). Optional.
	Observer observe.Observer
	// Codec decodes the server's answers; default JSONCodec{}.
	Codec Codec[T]
	// WatchList lists with a WATCH with sendInitialEvents=true (KEP-3157)
	// instead of a paginated LIST, unless the server refuses it.
	WatchList bool
	// ListOptions, when set, adjusts every LIST page and WATCH but the
	// probe's (a shard's selector); Filter leaves out of the store what it
	// refuses. Both are called on the loop's goroutine.
	ListOptions func(*metav1.ListOptions)
	Filter      func(T) bool
}

// Watcher keeps a Store in step with one resource on the API server by
// listing it, then watching it from the list's resourceVersion, forever.
type Watcher[T Object] struct {
	source Source
	store  *store.Store[T]
	opts   Options[T]
	log    klog.Logger // Run's context's, named "watcher"

	// pos is where the store stands, replaced whole, so that a reader
	// never sees one list's resourceVersion beside another's.
	pos        atomic.Pointer[Position]
	synced     chan struct{}
	syncedOnce sync.Once
	// partial is a list that failed on the way, for the List that resumes
	// it, and pages the pages it read.
	partial *store.Replacement[T]
	pages   int
	// relists: a Relist not in effect yet (its prepare), and the cancel of
	// the request in flight, which a Relist cuts short.
	relists struct {
		sync.Mutex
		prepare func() bool
		cut     context.CancelFunc
	}
}

// New returns a watcher that fills s from src. Call Run to start it.
func New[T Object](src Source, s *store.Store[T], opts Options[T]) *Watcher[T] {
	opts.PageSize = cmp.Or(opts.PageSize, DefaultPageSize)
	opts.WatchTimeoutMin = cmp.Or(opts.WatchTimeoutMin, DefaultWatchTimeoutMin)
	if opts.WatchTimeoutMax < opts.WatchTimeoutMin {
		opts.WatchTimeoutMax = 2 * opts.WatchTimeoutMin
	}
	opts.Backoff = cmp.Or(opts.Backoff, DefaultBackoff)
	opts.SilenceLimit = cmp.Or(opts.SilenceLimit, DefaultSilenceLimit)
	if opts.Rand == nil {
		opts.Rand = rand.Float64
	}
	if opts.Handler == nil {
		opts.Handler = func(store.Delta[T]) {}
	}
	if opts.ListOptions == nil {
		opts.ListOptions = func(*metav1.ListOptions) {}
	}
	opts.Codec = cmp.Or[Codec[T]](opts.Codec, JSONCodec[T]{})
	w := &Watcher[T]{source: src, store: s, opts: opts, synced: make(chan struct{})}
	w.pos.Store(&Position{})
	return w
}

// Synced is closed once the first list is in the store.
func (w *Watcher[T]) Synced() <-chan struct{} { return w.synced }

// ResourceVersion is the last resourceVersion the store is synced to.
func (w *Watcher[T]) ResourceVersion() string { return w.pos.Load().At }

// Position is where the store stands: At, the last resourceVersion it is
// synced to; Since, the last list's (every event since is in, "" before the
// first list); Lists, how many lists it took.
type Position struct {
	Since, At string
	Lists     uint64
}

// Position is where the store stands now, read in one step.
func (w *Watcher[T]) Position() Position { return *w.pos.Load() }

// Relist cuts the request in flight short (a backoff is waited out) and makes the
// loop list again (Machine.Resharded), after calling prepare on the loop's
// goroutine: it may change ListOptions and Filter, and withdraws the
// request by returning false. Of several Relists, the last prepare counts.
func (w *Watcher[T]) Relist(prepare func() bool) {
	w.relists.Lock()
	defer w.relists.Unlock()
	w.relists.prepare = prepare
	if w.relists.cut != nil {
		w.relists.cut()
	}
}

// Run performs the actions the Machine decides until ctx ends, retrying
// every failure. It logs through klog.FromContext(ctx).
func (w *Watcher[T]) Run(ctx context.Context) {
	w.log = klog.LoggerWithName(klog.FromContext(ctx), "watcher")
	m := NewMachine(w.opts.Backoff, w.opts.WatchList, w.opts.Rand)
	m.SilenceLimit = w.opts.SilenceLimit
	act := m.Start(time.Now())
	for act.Kind != Stop {
		// A Relist (sharding's hook: the shard changed) replaces the
		// action and cuts any but a Wait short. Without one, this and the
		// cut below do nothing.
		if act.Kind != Wait && ctx.Err() == nil {
			act = w.relist(m, act)
		}
		actx, cancel := context.WithCancel(ctx)
		if act.Kind != Wait {
			w.setCut(cancel)
		}
		var o Outcome
		switch act.Kind {
		case List:
			o = w.list(actx, act.Continue)
		case Watch, WatchList:
			o = w.stream(actx, act, func(rv string) {
				// A WatchList's initial state is in the store; the machine
				// says to keep reading (Listing → Watching on the same stream).
				w.step(m, Outcome{At: time.Now(), Listed: true, RV: rv})
			})
		case Probe:
			o = w.probe(actx)
		case Wait:
			o = w.wait(actx, act.Delay)
		default:
			panic(fmt.Sprintf("watcher: the machine asked for %s outside a stream", act.Kind))
		}
		cut := act.Kind != Wait && w.setCut(nil)
		cancel()
		switch {
		case ctx.Err() != nil:
			o.Err = context.Canceled
		case cut:
			// Cut short for a Relist: what the action would have led to
			// no longer matters; the relist does.
			continue
		}
		act = w.step(m, o)
	}
}

// setCut lets a Relist cancel the action about to start with cut (at once
// if a Relist is waiting already), or no action (nil); it tells whether a
// Relist is waiting.
func (w *Watcher[T]) setCut(cut context.CancelFunc) (waiting bool) {
	w.relists.Lock()
	defer w.relists.Unlock()
	w.relists.cut = cut
	if cut != nil && w.relists.prepare != nil {
		cut()
	}
	return w.relists.prepare != nil
}

// relist puts a Relist in effect, if one is waiting: its prepare, then the
// machine relists. Otherwise act goes on.
func (w *Watcher[T]) relist(m *Machine, act Action) Action {
	w.relists.Lock()
	prepare := w.relists.prepare
	w.relists.prepare = nil
	w.relists.Unlock()
	if prepare == nil || !prepare() {
		return act
	}
	w.partial = nil
	from := m.State
	a := m.Resharded()
	report(w, StateChanged{From: from, To: m.State, Reason: a.Reason})
	return a
}

// step feeds an outcome to the machine and reports the transition.
func (w *Watcher[T]) step(m *Machine, o Outcome) Action {
	from := m.State
	a := m.Step(o)
	w.setRV(m.RV)
	w.logStep(from, m.State, a)
	report(w, StateChanged{From: from, To: m.State, Reason: a.Reason, TimeTravel: a.TimeTravel})
	if a.Kind == Wait {
		report(w, BackoffStarted{Delay: a.Delay, Class: a.Class})
	}
	return a
}

func (w *Watcher[T]) wait(ctx context.Context, d time.Duration) Outcome {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return Outcome{At: time.Now(), Err: context.Canceled}
	case <-t.C:
		return Outcome{At: time.Now()}
	}
}

// logStep logs a transition: failures, relists and time travel at the
// default level (a user must see why nothing happens), the rest at -v=3.
func (w *Watcher[T]) logStep(from, to State, a Action) {
	switch {
	case a.Class == Denied && a.Kind == Wait:
		w.log.Error(a.Err, "Access denied: check the credentials and the RBAC rules (this controller needs list and watch); backing off", "after", from, "delay", a.Delay)
	case a.Kind == Wait && a.Err != nil:
		w.log.Error(a.Err, "Request failed; backing off", "after", from, "class", a.Class, "delay", a.Delay)
	case a.Kind == Wait:
		w.log.Info("Backing off", "after", from, "reason", a.Reason, "delay", a.Delay)
	case a.TimeTravel:
		w.log.Info("Time travel: the server's resourceVersion went backwards", "reason", a.Reason)
	case to == Relisting && from != Relisting:
		w.log.Info("Relisting", "reason", a.Reason)
	default:
		w.log.V(3).Info("State change", "from", from, "to", to, "reason", a.Reason)
	}
}

// report gives e to Options.Observer, if any. Generic, so that with no
// Observer an event costs no allocation.
func report[T Object, E observe.Event](w *Watcher[T], e E) {
	if w.opts.Observer != nil {
		w.opts.Observer.Observe(e)
	}
}

// setRV moves where the store stands, its coverage unchanged.
func (w *Watcher[T]) setRV(rv string) {
	p := *w.pos.Load()
	p.At = rv
	w.pos.Store(&p)
}

// list reads every page into a Replacement and swaps it into the store. It
// asks for resourceVersion "": the latest data, read from etcd, paginated.
// A list that fails on the way keeps what it read (w.partial): given the
// failed page's token (cont), the next list goes on from there.
func (w *Watcher[T]) list(ctx context.Context, cont string) Outcome {
	if cont == "" || w.partial == nil {
		w.partial, w.pages = w.store.NewReplacement(), 0
	}
	repl := w.partial
	for {
		opts := metav1.ListOptions{Limit: w.opts.PageSize, Continue: cont}
		w.opts.ListOptions(&opts)
		w.pages++
		items := 0
		meta, err := w.readList(ctx, opts,
			func(obj T) {
				if w.keep(obj) {
					items++
					repl.Add(obj)
				}
			},
			func(skip *SkipError) {
				repl.Keep(skip.Key, skip.UID) // listed, but unreadable: not a deletion
				w.skipped(skip)
			})
		if err != nil { // a page that failed delivered nothing (Codec.DecodeList)
			return Outcome{At: time.Now(), Err: err, Continue: cont}
		}
		report(w, ListPage{Page: w.pages, Items: items, Continue: meta.Continue, RV: meta.ResourceVersion})
		if cont = meta.Continue; cont == "" {
			w.partial = nil
			w.commit(repl, meta.ResourceVersion)
			return Outcome{At: time.Now(), RV: meta.ResourceVersion}
		}
	}
}

// readList reads one LIST page (Codec.DecodeList).
func (w *Watcher[T]) readList(ctx context.Context, opts metav1.ListOptions, add func(T), bad func(*SkipError)) (metav1.ListMeta, error) {
	body, err := w.source.List(ctx, opts)
	if err != nil {
		return metav1.ListMeta{}, err
	}
	defer body.Close()
	return w.opts.Codec.DecodeList(body, add, bad)
}

// probe lists one item, for the list's resourceVersion: where the server is.
func (w *Watcher[T]) probe(ctx context.Context) Outcome {
	meta, err := w.readList(ctx, metav1.ListOptions{Limit: 1}, func(T) {}, func(*SkipError) {})
	report(w, Probed{RV: meta.ResourceVersion, Ours: w.ResourceVersion(), Err: err})
	return Outcome{At: time.Now(), RV: meta.ResourceVersion, Err: err}
}

// commit swaps a finished (re)list into the store and hands out its deltas.
func (w *Watcher[T]) commit(repl *store.Replacement[T], rv string) {
	size := repl.Len()
	deltas := repl.Commit()
	var n [store.Deleted + 1]int // by type
	for _, d := range deltas {
		n[d.Type]++
	}
	// Where the store stands changes before anyone hears of the list.
	w.pos.Store(&Position{At: rv, Since: rv, Lists: w.pos.Load().Lists + 1})
	report(w, Replaced{RV: rv, Size: size, Added: n[store.Added], Updated: n[store.Updated], Deleted: n[store.Deleted]})
	for _, d := range deltas {
		w.hand(d)
	}
	w.syncedOnce.Do(func() { close(w.synced) })
}

// errNoInitialEventsEnd: a WatchList stream ended before its initial events did.
var errNoInitialEventsEnd = errors.New("watch-list stream ended before the initial-events-end bookmark")

// stream makes one WATCH request and reads it until it ends: a Watch from
// act.RV, or a WatchList, whose initial events fill a Replacement swapped in
// at the initial-events-end bookmark (then listed is called, and the stream
// goes on). A stream silent for Options.SilenceLimit (less act.Quiet) is
// cancelled by the watchdog; its timeout plus a minute is a backstop.
func (w *Watcher[T]) stream(ctx context.Context, act Action, listed func(rv string)) (o Outcome) {
	opts := metav1.ListOptions{ResourceVersion: act.RV}
	w.opts.ListOptions(&opts)
	var repl *store.Replacement[T]
	if act.Kind == WatchList {
		yes := true
		opts.ResourceVersionMatch, opts.SendInitialEvents = metav1.ResourceVersionMatchNotOlderThan, &yes
		repl = w.store.NewReplacement()
	}
	timeout := w.watchTimeout()
	secs := int64(timeout / time.Second)
	opts.AllowWatchBookmarks, opts.TimeoutSeconds = true, &secs
	sctx, cancel := context.WithTimeout(ctx, timeout+time.Minute)
	defer cancel()
	report(w, WatchStarted{RV: opts.ResourceVersion, Timeout: timeout, InitialEvents: repl != nil})
	start := time.Now()
	o.Timeout = timeout
	defer func() { o.At, o.Open = time.Now(), time.Since(start) }()

	body, err := w.source.Watch(sctx, opts)
	if err != nil {
		o.Err = err
		return o
	}
	o.Opened = true
	defer body.Close()
	var silent atomic.Bool
	dog := time.AfterFunc(w.opts.SilenceLimit-act.Quiet, func() { silent.Store(true); cancel() })
	defer dog.Stop()
	defer func() {
		if silent.Load() && ctx.Err() == nil {
			o.Err, o.Silent = ErrSilent, true
		}
		report(w, WatchEnded{Frames: o.Frames, Open: time.Since(start), Err: o.Err, Quiet: act.Quiet})
	}()

	dec := w.opts.Codec.DecodeEvents(body)
	for {
		ev, err := dec.Next()
		arrived := time.Now()
		dog.Reset(w.opts.SilenceLimit)
		skip := asSkip(err)
		switch {
		case skip != nil:
			w.skipped(skip)
			switch {
			case repl != nil && ev.Type == Deleted && skip.Key != "":
				repl.Remove(skip.Key) // as below: the key is gone
			case repl != nil && ev.Type != "" && ev.Type != Added && ev.Type != Modified && ev.Type != Deleted:
				// a bookmark or an unknown type is no listed item
			case repl != nil:
				repl.Keep(skip.Key, skip.UID) // listed, but unreadable: keep what we have, if it is the same object
			case skip.Key == "":
			case ev.Type == Deleted:
				// We cannot read the final state, but we know the key is gone.
				if d, known := w.store.DeleteKey(skip.Key, *new(T)); known {
					w.hand(d)
				}
			case ev.Type == Added || ev.Type == Modified:
				// Under another UID, the stored object is gone (Replacement.Keep).
				if d, known := w.store.DeleteOther(skip.Key, skip.UID); known {
					w.hand(d)
				}
			}
			continue
		case errors.Is(err, io.EOF) && repl != nil:
			o.Err = errNoInitialEventsEnd
			return o
		case errors.Is(err, io.EOF):
			return o
		case err != nil:
			o.Err = err
			return o
		}
		switch {
		case ev.Type == Error:
			o.Err, o.ErrorEvent = ev.Err, true
			return o
		case ev.Type != Bookmark && !w.keep(ev.Object):
			if repl != nil {
				continue
			}
			// filtered out, but a live event: its resourceVersion counts
		case repl != nil && ev.Type == Bookmark && ev.InitialEventsEnd:
			w.commit(repl, ev.RV)
			repl = nil
			listed(ev.RV)
		case repl != nil && ev.Type == Bookmark:
			continue // a progress bookmark inside the initial events
		case repl != nil && ev.Type == Deleted:
			repl.Remove(store.KeyOf(ev.Object))
			continue
		case repl != nil:
			repl.Add(ev.Object)
			continue
		case ev.Type == Bookmark:
			report(w, BookmarkReceived{RV: ev.RV, InitialEventsEnd: ev.InitialEventsEnd})
		default:
			w.apply(ev, arrived)
		}
		o.Frames++
		o.RV = ev.RV
		w.setRV(ev.RV)
	}
}

func (w *Watcher[T]) watchTimeout() time.Duration {
	lo, hi := w.opts.WatchTimeoutMin, w.opts.WatchTimeoutMax
	d := lo + time.Duration(w.opts.Rand()*float64(hi-lo))
	return max(d.Truncate(time.Second), time.Second)
}

// apply writes one event to the store and hands the delta to the handler.
func (w *Watcher[T]) apply(ev Event[T], arrived time.Time) {
	var d, gone store.Delta[T]
	var changed bool
	var written time.Time
	if ev.Type != Deleted && w.opts.Observer != nil { // for Received only
		written, _ = WrittenAt(ev.Object)
	}
	if ev.Type == Deleted {
		d, changed = w.store.Delete(ev.Object)
	} else {
		d, changed, gone = w.store.Upsert(ev.Object)
	}
	key := d.Key
	if !changed && w.opts.Observer != nil {
		key = store.KeyOf(ev.Object)
	}
	report(w, Received{Type: ev.Type, Key: key, RV: ev.RV, Arrived: arrived, Written: written, Object: ev.Object})
	if gone.Type != 0 { // the key held another object
		w.hand(gone)
	}
	if changed {
		w.hand(d)
	}
}

// hand gives a delta to the handler, and says so.
func (w *Watcher[T]) hand(d store.Delta[T]) {
	report(w, Handed{Type: d.Type, Key: d.Key, FinalStateUnknown: d.FinalStateUnknown})
	w.opts.Handler(d)
}

// keep tells whether obj passes Options.Filter.
func (w *Watcher[T]) keep(obj T) bool { return w.opts.Filter == nil || w.opts.Filter(obj) }

func (w *Watcher[T]) skipped(err *SkipError) {
	w.log.Error(err, "Skipping an object that cannot be decoded")
	report(w, Skipped{Err: err})
}
