// Package ui serves a live page of the informer mechanics, for learners:
// the watcher's state diagram with the current state lit, the
// resourceVersion, a timeline of LIST pages, events, bookmarks, 410s and
// relists, the store's size and the deltas of the last relist, the queue
// (keys ready, keys waiting out a retry with their due time and retry count,
// keys in the workers' hands) and the last reconciles. It is what --explain
// narrates, drawn.
//
// The page is plain HTML, CSS and JavaScript embedded in the binary
// (go:embed; nothing is fetched from the network), fed by Server-Sent Events
// from the same observer hooks as the metrics and the narration:
//
//	watcher, queue, workers ──Observe──▶ Hub ── ring of the last events
//	                                      │      + the current picture
//	                                      ▼
//	                     one goroutine per browser (its HTTP handler):
//	                     reads the ring from its own cursor, writes SSE
//
// # A slow browser never slows the controller
//
// Observe, on the controller's goroutines, copies out of the event the few
// fields the page draws, appends them to a fixed-size ring and updates a few
// fields under a mutex, then pokes each browser's goroutine without waiting
// (a channel of one). It never writes JSON, never writes to a network
// connection and never waits for a browser. Each browser's handler does the
// encoding and the writing, at its own pace:
//   - events are sent in batches, at most every FlushEvery, so a burst of
//     ten thousand events costs a browser a few dozen writes (merged);
//   - a browser that falls more than a ring behind skips what was
//     overwritten and is told how much it missed: the page shows the count
//     (dropped), then the current picture, which is always whole;
//   - a browser that takes more than WriteTimeout to accept a write is
//     disconnected (EventSource reconnects by itself). A browser that
//     stops reading is seen only once the connection's buffers are full
//     (hundreds of KiB): until then its writes succeed;
//   - a stream ends after MaxStream and a random part of a quarter more,
//     whatever the browser does: it reconnects, saying the last event it
//     saw (Last-Event-ID), and passes the server's guard again, so a
//     viewer whose grant was taken away stops seeing events, and one that
//     stopped reading gives its slot back;
//   - at most MaxClients browsers at once, at most MaxPerViewer of one
//     viewer (Options.Viewer); more get 503.
//
// Memory is the ring whatever the number of browsers: Options.Ring events
// of at most MaxBytesPerEvent each. A buffered event keeps only what the
// page draws, copied: never the object a watch event carries (whose size
// anyone who may update it chooses), nor a string sharing its allocation;
// each text is cut to MaxText bytes.
package ui

import (
	"cmp"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"rawwatch/freshness"
	"rawwatch/leader"
	"rawwatch/observe"
	"rawwatch/queue"
	"rawwatch/reconcile"
	"rawwatch/watcher"
)

//go:embed static
var static embed.FS

// Defaults of Options.
const (
	DefaultRing         = 1024
	DefaultMaxClients   = 8
	DefaultWriteTimeout = 10 * time.Second
	DefaultFlushEvery   = 100 * time.Millisecond
	DefaultPictureEvery = 500 * time.Millisecond
	DefaultMaxStream    = time.Minute
	DefaultMaxPerViewer = 4
	// ListMax is how many keys of each kind the queue view shows.
	ListMax = 50
	// MaxText is the most bytes of one text (a key, an error) the page
	// keeps; a longer one is cut, marked with "…".
	MaxText = 512
	// MaxBytesPerEvent is the most heap one buffered event keeps: its
	// fields (at most eight, in a small map) and their texts.
	MaxBytesPerEvent = 2 << 10
)

// Options say where the parts of the picture that are read rather than
// observed come from, and bound what a browser may cost. Nil functions leave
// their part out.
type Options struct {
	Queue           func(max int) queue.Snapshot
	StoreLen        func() int
	ResourceVersion func() string

	Ring, MaxClients         int
	WriteTimeout, FlushEvery time.Duration
	// PictureEvery is how often the current picture is sent (the queue's
	// keys and the delays count down between events too).
	PictureEvery time.Duration
	// MaxStream is how long one event stream lasts, plus a random part of
	// a quarter more so that viewers do not all come back at once.
	MaxStream time.Duration
	// Viewer names who a request comes from (the user the server's guard
	// authenticated); "" is nobody in particular, bounded by MaxClients
	// only. MaxPerViewer bounds the streams one named viewer holds.
	Viewer       func(*http.Request) string
	MaxPerViewer int
}

// Hub hears every event (it is an observe.Observer) and serves the page.
type Hub struct {
	opts    Options
	clients atomic.Int32
	dropped atomic.Int64 // events browsers missed, summed over browsers

	mu      sync.Mutex
	viewers map[string]int // streams open, per named viewer
	ring    []item         // ring[seq % len(ring)]
	next    uint64         // seq of the next event
	woken   map[chan struct{}]struct{}
	pic     picture
}

// item is one buffered event: what the page draws of it (see row).
type item struct {
	seq uint64
	row map[string]any
}

// picture is what the page shows apart from the timeline; it is sent whole.
type picture struct {
	State       string             `json:"state"`
	Transitions []transition       `json:"transitions"` // newest last
	LastRelist  *relist            `json:"lastRelist,omitempty"`
	Workers     map[int]held       `json:"workers"`
	Reconciles  []reconciled       `json:"reconciles"` // newest last
	Leading     bool               `json:"leading"`
	Probe       map[string]float64 `json:"probe,omitempty"` // stage → seconds, the last heartbeat
	LastHeard   time.Time          `json:"-"`

	// Filled in when sent.
	RV        string     `json:"rv"`
	Store     int        `json:"store"`
	Queue     *queueView `json:"queue,omitempty"`
	SilenceMS int64      `json:"silenceMs"`
	Dropped   int64      `json:"dropped"`
	Now       int64      `json:"now"`
}

type transition struct {
	At         int64  `json:"at"`
	From       string `json:"from"`
	To         string `json:"to"`
	Reason     string `json:"reason"`
	TimeTravel bool   `json:"timeTravel,omitempty"`
}

type relist struct {
	At     int64          `json:"at"`
	RV     string         `json:"rv"`
	Deltas map[string]int `json:"deltas"`
	First  bool           `json:"first"`
}

type held struct {
	Key   string `json:"key"`
	Since int64  `json:"since"`
}

type reconciled struct {
	At      int64   `json:"at"`
	Worker  int     `json:"worker"`
	Key     string  `json:"key"`
	TookMS  float64 `json:"tookMs"`
	Err     string  `json:"err,omitempty"`
	RetryMS int64   `json:"retryMs,omitempty"`
}

type queueView struct {
	Ready      []string      `json:"ready"`
	ReadyLen   int           `json:"readyLen"`
	Delayed    []delayedView `json:"delayed"`
	DelayedLen int           `json:"delayedLen"`
	Processing []string      `json:"processing"`
}

type delayedView struct {
	Key     string `json:"key"`
	DueMS   int64  `json:"dueInMs"`
	Retries int    `json:"retries"`
}

// New returns a Hub; zero Options fields take the defaults.
func New(opts Options) *Hub {
	// A zero or negative field takes its default.
	opts.Ring = cmp.Or(max(opts.Ring, 0), DefaultRing)
	opts.MaxClients = cmp.Or(max(opts.MaxClients, 0), DefaultMaxClients)
	opts.WriteTimeout = cmp.Or(max(opts.WriteTimeout, 0), DefaultWriteTimeout)
	opts.FlushEvery = cmp.Or(max(opts.FlushEvery, 0), DefaultFlushEvery)
	opts.PictureEvery = cmp.Or(max(opts.PictureEvery, 0), DefaultPictureEvery)
	opts.MaxStream = cmp.Or(max(opts.MaxStream, 0), DefaultMaxStream)
	opts.MaxPerViewer = cmp.Or(max(opts.MaxPerViewer, 0), DefaultMaxPerViewer)
	return &Hub{opts: opts, ring: make([]item, opts.Ring), woken: map[chan struct{}]struct{}{}, viewers: map[string]int{},
		pic: picture{State: watcher.Listing.String(), Workers: map[int]held{}, LastHeard: time.Now()}}
}

// SetResourceVersion sets where the resourceVersion is read from (the
// watcher, which exists after the Hub that observes it); call it before
// serving.
func (h *Hub) SetResourceVersion(f func() string) { h.opts.ResourceVersion = f }

// Viewers is how many browsers are connected to the event stream.
func (h *Hub) Viewers() int { return int(h.clients.Load()) }

// Dropped is how many events browsers missed because they fell behind.
func (h *Hub) Dropped() int64 { return h.dropped.Load() }

// Observe records e. It never blocks on a browser (see the package doc).
func (h *Hub) Observe(e observe.Event) {
	now := time.Now()
	var r map[string]any
	switch e.(type) {
	case reconcile.Started, freshness.Measured, queue.Added, queue.Got, watcher.Handed, freshness.Beat:
		// Not in the timeline: the picture shows these (workers, queue, probe); the timeline would drown.
	default:
		r = row(e, now)
	}
	h.mu.Lock()
	p := &h.pic
	switch e := e.(type) {
	case watcher.StateChanged:
		p.State = e.To.String()
		p.Transitions = keepLast(append(p.Transitions, transition{At: ms(now), From: e.From.String(), To: e.To.String(),
			Reason: text(e.Reason), TimeTravel: e.TimeTravel}), 12)
	case watcher.Replaced:
		p.LastRelist = &relist{At: ms(now), RV: text(e.RV), First: p.LastRelist == nil,
			Deltas: map[string]int{"size": e.Size, "added": e.Added, "updated": e.Updated, "deleted": e.Deleted}}
		p.LastHeard = now
	case watcher.ListPage, watcher.BookmarkReceived:
		p.LastHeard = now
	case watcher.Received:
		p.LastHeard = now
	case reconcile.Started:
		p.Workers[e.Worker] = held{Key: text(e.Key), Since: ms(now)}
	case reconcile.Finished:
		delete(p.Workers, e.Worker)
		p.Reconciles = keepLast(append(p.Reconciles, reconciled{At: ms(now), Worker: e.Worker, Key: r["key"].(string),
			TookMS: r["tookMs"].(float64), Err: r["err"].(string), RetryMS: e.RetryIn.Milliseconds()}), 20)
	case leader.Leading:
		p.Leading = e.Leading
	case freshness.Measured:
		if p.Probe == nil || e.Stage == freshness.Event {
			p.Probe = map[string]float64{}
		}
		p.Probe[string(e.Stage)] = e.Took.Seconds()
	}
	if r != nil {
		r["seq"] = h.next
		h.ring[h.next%uint64(len(h.ring))] = item{seq: h.next, row: r}
		h.next++
		for c := range h.woken {
			select {
			case c <- struct{}{}:
			default: // already poked
			}
		}
	}
	h.mu.Unlock()
}

func keepLast[T any](s []T, n int) []T {
	if len(s) > n {
		return append(s[:0:0], s[len(s)-n:]...)
	}
	return s
}

func ms(t time.Time) int64 { return t.UnixMilli() }

// Handler serves the page under prefix (e.g. "/ui/"): prefix itself is the
// page, prefix+"events" the event stream.
func (h *Hub) Handler(prefix string) http.Handler {
	mux := http.NewServeMux()
	files, _ := fs.Sub(static, "static")
	mux.Handle(prefix, http.StripPrefix(prefix, http.FileServerFS(files)))
	mux.HandleFunc(prefix+"events", h.serveEvents)
	return mux
}

// Paths are the paths Handler(prefix) serves: the page, its files and the
// event stream.
func (h *Hub) Paths(prefix string) []string {
	paths := []string{prefix, prefix + "events"}
	entries, _ := fs.ReadDir(static, "static")
	for _, e := range entries {
		paths = append(paths, prefix+e.Name())
	}
	return paths
}

// serveEvents streams Server-Sent Events to one browser until it leaves,
// falls too far behind to be written to, or the server shuts down.
func (h *Hub) serveEvents(w http.ResponseWriter, r *http.Request) {
	viewer := ""
	if h.opts.Viewer != nil {
		viewer = h.opts.Viewer(r)
	}
	if msg := h.admit(viewer); msg != "" {
		http.Error(w, msg, http.StatusServiceUnavailable)
		return
	}
	defer h.leave(viewer)
	life := h.opts.MaxStream + rand.N(h.opts.MaxStream/4+1)
	end := time.NewTimer(life)
	defer end.Stop()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")

	wake := make(chan struct{}, 1)
	h.mu.Lock()
	h.woken[wake] = struct{}{}
	// A new browser starts with the events still in the ring; one that
	// reconnects, after the last event it saw.
	cursor := h.next - min(h.next, uint64(len(h.ring)))
	if seen, err := strconv.ParseUint(r.Header.Get("Last-Event-ID"), 10, 64); err == nil && seen < h.next {
		cursor = max(cursor, seen+1)
	}
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.woken, wake)
		h.mu.Unlock()
	}()

	s := &stream{w: w, rc: rc, timeout: h.opts.WriteTimeout}
	tick := time.NewTicker(h.opts.PictureEvery)
	defer tick.Stop()
	var missed int64
	for first := true; ; first = false {
		items, skipped := h.since(cursor)
		cursor += skipped + uint64(len(items))
		missed += int64(skipped)
		if skipped > 0 {
			h.dropped.Add(int64(skipped))
			s.send("dropped", map[string]any{"n": skipped, "total": missed})
		}
		for _, it := range items {
			s.sendID("item", strconv.FormatUint(it.seq, 10), it.row)
		}
		if first || len(items) > 0 || skipped > 0 {
			s.send("picture", h.picture(missed))
		}
		if !s.flush() {
			return
		}
		// Merge: wait a little before the next batch, whatever the rate.
		select {
		case <-r.Context().Done():
			return
		case <-end.C:
			return
		case <-time.After(h.opts.FlushEvery):
		}
		select {
		case <-r.Context().Done():
			return
		case <-end.C:
			return
		case <-wake:
		case <-tick.C:
			s.send("picture", h.picture(missed))
		}
	}
}

// admit counts a stream in, or says why not.
func (h *Hub) admit(viewer string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if int(h.clients.Load()) >= h.opts.MaxClients {
		return fmt.Sprintf("at most %d viewers at once", h.opts.MaxClients)
	}
	if viewer != "" && h.viewers[viewer] >= h.opts.MaxPerViewer {
		return fmt.Sprintf("at most %d streams of one viewer at once", h.opts.MaxPerViewer)
	}
	h.clients.Add(1)
	if viewer != "" {
		h.viewers[viewer]++
	}
	return ""
}

func (h *Hub) leave(viewer string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.clients.Add(-1)
	if viewer != "" {
		if h.viewers[viewer]--; h.viewers[viewer] == 0 {
			delete(h.viewers, viewer)
		}
	}
}

// since copies the events from seq on; skipped counts those overwritten
// before this browser read them.
func (h *Hub) since(seq uint64) (items []item, skipped uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if oldest := h.next - min(h.next, uint64(len(h.ring))); seq < oldest {
		skipped, seq = oldest-seq, oldest
	}
	for ; seq < h.next; seq++ {
		items = append(items, h.ring[seq%uint64(len(h.ring))])
	}
	return items, skipped
}

// picture copies the current picture and reads the parts that are read.
func (h *Hub) picture(missed int64) picture {
	h.mu.Lock()
	p := h.pic
	p.Transitions = append([]transition(nil), p.Transitions...)
	p.Reconciles = append([]reconciled(nil), p.Reconciles...)
	p.Workers = make(map[int]held, len(h.pic.Workers))
	for k, v := range h.pic.Workers {
		p.Workers[k] = v
	}
	if h.pic.Probe != nil {
		p.Probe = make(map[string]float64, len(h.pic.Probe))
		for k, v := range h.pic.Probe {
			p.Probe[k] = v
		}
	}
	h.mu.Unlock()
	now := time.Now()
	p.Now, p.Dropped, p.SilenceMS = ms(now), missed, now.Sub(p.LastHeard).Milliseconds()
	if h.opts.ResourceVersion != nil {
		p.RV = h.opts.ResourceVersion()
	}
	if h.opts.StoreLen != nil {
		p.Store = h.opts.StoreLen()
	}
	if h.opts.Queue != nil {
		q := h.opts.Queue(ListMax)
		v := &queueView{Ready: q.Ready, ReadyLen: q.ReadyLen, DelayedLen: q.DelayedLen, Processing: q.Processing}
		for _, d := range q.Delayed {
			v.Delayed = append(v.Delayed, delayedView{Key: d.Key, DueMS: d.Due.Sub(now).Milliseconds(), Retries: d.Retries})
		}
		p.Queue = v
	}
	return p
}

// stream writes SSE frames to one browser; after a failed write it writes
// nothing more.
type stream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	err     error
}

func (s *stream) send(event string, v any) { s.sendID(event, "", v) }

// sendID sends an event with an id (the browser says the last one it saw
// when it reconnects); "" sends none.
func (s *stream) sendID(event, id string, v any) {
	if s.err != nil {
		return
	}
	if id != "" {
		s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
		if _, s.err = fmt.Fprintf(s.w, "id: %s\n", id); s.err != nil {
			return
		}
	}
	data, err := json.Marshal(v)
	if err != nil {
		data, _ = json.Marshal(map[string]string{"kind": "unencodable", "err": err.Error()})
	}
	s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	_, s.err = fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", event, data)
}

func (s *stream) flush() bool {
	if s.err == nil {
		s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
		s.err = s.rc.Flush()
	}
	return s.err == nil
}

// row is what the page's timeline draws of one event: its kind and the
// event's fields, copied (each text cut to MaxText), so that the ring keeps
// nothing else of it alive. Observe adds "seq" when it buffers the row.
func row(e observe.Event, at time.Time) map[string]any {
	m := map[string]any{"at": ms(at)}
	errText := func(err error) string {
		if err == nil {
			return ""
		}
		return text(err.Error())
	}
	switch e := e.(type) {
	case watcher.StateChanged:
		m["kind"], m["from"], m["to"], m["reason"], m["timeTravel"] = "state", e.From.String(), e.To.String(), text(e.Reason), e.TimeTravel
	case watcher.ListPage:
		m["kind"], m["page"], m["items"], m["rv"], m["more"] = "page", e.Page, e.Items, text(e.RV), e.Continue != ""
	case watcher.Replaced:
		m["kind"], m["rv"], m["size"], m["added"], m["updated"], m["deleted"] = "replaced", text(e.RV), e.Size, e.Added, e.Updated, e.Deleted
	case watcher.WatchStarted:
		m["kind"], m["rv"], m["timeoutS"], m["initialEvents"] = "watch", text(e.RV), e.Timeout.Seconds(), e.InitialEvents
	case watcher.Received:
		m["kind"], m["type"], m["key"], m["rv"] = "event", text(e.Type), text(e.Key), text(e.RV)
	case watcher.BookmarkReceived:
		m["kind"], m["rv"], m["initialEventsEnd"] = "bookmark", text(e.RV), e.InitialEventsEnd
	case watcher.WatchEnded:
		m["kind"], m["frames"], m["openS"], m["err"] = "ended", e.Frames, e.Open.Seconds(), errText(e.Err)
		m["gone"] = apierrors.IsResourceExpired(e.Err) || apierrors.IsGone(e.Err)
	case watcher.BackoffStarted:
		m["kind"], m["delayMs"], m["class"] = "backoff", e.Delay.Milliseconds(), e.Class.String()
	case watcher.Probed:
		m["kind"], m["rv"], m["err"] = "probe", text(e.RV), errText(e.Err)
	case watcher.Skipped:
		m["kind"], m["key"], m["err"] = "skipped", text(e.Err.Key), errText(e.Err)
	case reconcile.Finished:
		m["kind"], m["worker"], m["key"], m["tookMs"], m["err"], m["retryMs"] = "reconcile", e.Worker, text(e.Key),
			float64(e.Took.Microseconds())/1000, errText(e.Err), e.RetryIn.Milliseconds()
	case reconcile.Paused:
		m["kind"], m["key"], m["forMs"], m["err"] = "paused", text(e.Key), e.For.Milliseconds(), errText(e.Err)
	case reconcile.Resynced:
		m["kind"], m["keys"] = "resync", e.Keys
	case leader.Leading:
		m["kind"], m["leading"] = "leading", e.Leading
	case leader.NewLeader:
		m["kind"], m["identity"] = "leader", text(e.Identity)
	default:
		m["kind"], m["type"] = "other", fmt.Sprintf("%T", e)
	}
	return m
}

// text is a copy of s, cut to MaxText bytes (at a character's start, and
// marked "…"): a copy, because a string may be part of a larger
// allocation (a decoded object's strings are one block) that it would
// keep alive.
func text(s string) string {
	if len(s) <= MaxText {
		return strings.Clone(s)
	}
	cut := MaxText - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
