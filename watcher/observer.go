package watcher

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/observe"
	"rawwatch/store"
)

// The events the watcher reports to its Options.Observer (package observe),
// on the loop's goroutine, in order.
type (
	// StateChanged: the machine moved (From may equal To: Watching→Watching
	// is a re-WATCH). Reason says why; TimeTravel marks a list older than
	// the resourceVersion we had.
	StateChanged struct {
		From, To   State
		Reason     string
		TimeTravel bool
	}
	// ListPage: one LIST page arrived with Items objects; Continue is the
	// token for the next page ("" on the last, whose RV is the list's).
	ListPage struct {
		Page, Items  int
		Continue, RV string
	}
	// Replaced: a (re)list was swapped into the store, which now holds Size
	// objects; Added, Updated and Deleted count the deltas it produced.
	Replaced struct {
		RV                            string
		Size, Added, Updated, Deleted int
	}
	// WatchStarted: a WATCH request is being made from RV (with
	// InitialEvents: a WatchList), asking the server to end it after Timeout.
	WatchStarted struct {
		RV            string
		Timeout       time.Duration
		InitialEvents bool
	}
	// Probed: a LIST of one item asked the server for its resourceVersion
	// (after a silent stream, or before re-watching after a WATCH that could
	// not open); RV is its answer, Err why there was none, Ours the
	// resourceVersion the store was at.
	Probed struct {
		RV, Ours string
		Err      error
	}
	// Received: an ADDED, MODIFIED or DELETED event was applied to the
	// store. Arrived is when its frame had been read and decoded (the store
	// write follows within microseconds: nothing sits between the two).
	// Written is the server's record of when the object was last written
	// (WrittenAt, read before the store dropped managedFields; zero when
	// unknown). Object is the object it carried, shared with the store: read
	// it, never change it.
	Received struct {
		Type, Key, RV    string
		Arrived, Written time.Time
		Object           metav1.Object
	}
	// BookmarkReceived: a BOOKMARK moved the resourceVersion to RV.
	BookmarkReceived struct {
		RV               string
		InitialEventsEnd bool
	}
	// WatchEnded: a stream closed after Frames frames, open for Open; Err is
	// why (nil: the server ended it; ErrSilent: the watchdog did). Quiet is
	// the silence before it (Action.Quiet), which the watchdog counted too.
	WatchEnded struct {
		Frames int
		Open   time.Duration
		Err    error
		Quiet  time.Duration
	}
	// BackoffStarted: the loop waits Delay before retrying, after an error of Class.
	BackoffStarted struct {
		Delay time.Duration
		Class ErrorClass
	}
	// Skipped: an event or list item could not be decoded and was left out.
	Skipped struct{ Err *SkipError }
	// Handed: a change went to the Handler (after the store was updated).
	Handed struct {
		Type              store.DeltaType
		Key               string
		FinalStateUnknown bool
	}
)

func (StateChanged) Component() string     { return "watcher" }
func (ListPage) Component() string         { return "watcher" }
func (Replaced) Component() string         { return "watcher" }
func (WatchStarted) Component() string     { return "watcher" }
func (Probed) Component() string           { return "watcher" }
func (Received) Component() string         { return "watcher" }
func (BookmarkReceived) Component() string { return "watcher" }
func (WatchEnded) Component() string       { return "watcher" }
func (BackoffStarted) Component() string   { return "watcher" }
func (Skipped) Component() string          { return "watcher" }
func (Handed) Component() string           { return "watcher" }

// Stats counts what the loop did. Every Watcher keeps one (see Watcher.Stats).
type Stats struct {
	listPages, lists, relists  atomic.Int64
	watches, bookmarks, events atomic.Int64
	received                   [len(receivedTypes)]atomic.Int64 // by type, as receivedTypes
	goneDeletes, skipped       atomic.Int64
	backoffs, probes           atomic.Int64
	mu                         sync.Mutex
	lastBookmarkRV             string
}

// receivedTypes are the event types Stats counts apart, in the order of
// Stats.received.
var receivedTypes = [...]string{Added, Modified, Deleted}

// StatsSnapshot is a copy of the counters at one moment.
type StatsSnapshot struct {
	// ListPages is the number of LIST requests that returned a page.
	ListPages int64
	// Lists counts completed lists, the first included; Relists the later ones.
	Lists, Relists int64
	// Watches is the number of WATCH requests made.
	Watches int64
	// Events counts ADDED+MODIFIED+DELETED events applied; Bookmarks the bookmarks.
	Events, Added, Modified, Deleted, Bookmarks int64
	// GoneDeletes counts Deleted deltas produced by relists (objects that
	// vanished while the watch was down).
	GoneDeletes int64
	// Skipped counts events and list items that could not be decoded.
	Skipped int64
	// Backoffs counts waits before a retry.
	Backoffs int64
	// Probes counts the one-item LISTs that asked where the server is.
	Probes int64
	// LastBookmarkRV is the resourceVersion of the last bookmark.
	LastBookmarkRV string
}

// Observe counts e.
func (s *Stats) Observe(e observe.Event) {
	switch e := e.(type) {
	case ListPage:
		s.listPages.Add(1)
	case Replaced:
		if s.lists.Add(1) > 1 {
			s.relists.Add(1)
		}
		s.goneDeletes.Add(int64(e.Deleted))
	case WatchStarted:
		s.watches.Add(1)
	case Received:
		s.events.Add(1)
		if i := slices.Index(receivedTypes[:], e.Type); i >= 0 {
			s.received[i].Add(1)
		}
	case BookmarkReceived:
		s.bookmarks.Add(1)
		s.mu.Lock()
		s.lastBookmarkRV = e.RV
		s.mu.Unlock()
	case BackoffStarted:
		s.backoffs.Add(1)
	case Probed:
		s.probes.Add(1)
	case Skipped:
		s.skipped.Add(1)
	}
}

// Snapshot copies the counters.
func (s *Stats) Snapshot() StatsSnapshot {
	s.mu.Lock()
	rv := s.lastBookmarkRV
	s.mu.Unlock()
	return StatsSnapshot{
		ListPages: s.listPages.Load(), Lists: s.lists.Load(), Relists: s.relists.Load(),
		Watches: s.watches.Load(), Events: s.events.Load(),
		Added: s.received[0].Load(), Modified: s.received[1].Load(), Deleted: s.received[2].Load(),
		Bookmarks: s.bookmarks.Load(), GoneDeletes: s.goneDeletes.Load(),
		Skipped: s.skipped.Load(), Backoffs: s.backoffs.Load(), Probes: s.probes.Load(), LastBookmarkRV: rv,
	}
}

// WrittenAt is the server's record of when obj was last written: the latest
// time in its managedFields (the apiserver stamps a manager's entry whenever
// a write of that manager changes a field), else its creation time. Whole
// seconds; false when the object carries neither (the store drops
// managedFields: ask before it takes the object).
func WrittenAt(obj metav1.Object) (time.Time, bool) {
	var t time.Time
	for _, f := range obj.GetManagedFields() {
		if f.Time != nil && f.Time.After(t) {
			t = f.Time.Time
		}
	}
	if t.IsZero() {
		t = obj.GetCreationTimestamp().Time
	}
	return t, !t.IsZero()
}
