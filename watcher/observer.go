package watcher

import (
	"sync"
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
	// Probed: a LIST of one item asked the server for its resourceVersion:
	// RV is its answer, Err why there was none, Ours the store's.
	Probed struct {
		RV, Ours string
		Err      error
	}
	// Received: an ADDED, MODIFIED or DELETED event was applied to the
	// store. Arrived is when its frame was read and decoded; Written is
	// WrittenAt of its object (zero when unknown). Object is shared with the
	// store: read it, never change it.
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
	// the silence before it (Action.Quiet).
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

// Stats counts what the loop did. Every Watcher keeps one (see Watcher.Stats).
type Stats struct {
	mu sync.Mutex
	n  StatsSnapshot
}

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
	// GoneDeletes counts Deleted deltas produced by relists.
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
	s.mu.Lock()
	defer s.mu.Unlock()
	n := &s.n
	switch e := e.(type) {
	case ListPage:
		n.ListPages++
	case Replaced:
		if n.Lists++; n.Lists > 1 {
			n.Relists++
		}
		n.GoneDeletes += int64(e.Deleted)
	case WatchStarted:
		n.Watches++
	case Received:
		n.Events++
		switch e.Type {
		case Added:
			n.Added++
		case Modified:
			n.Modified++
		case Deleted:
			n.Deleted++
		}
	case BookmarkReceived:
		n.Bookmarks++
		n.LastBookmarkRV = e.RV
	case BackoffStarted:
		n.Backoffs++
	case Probed:
		n.Probes++
	case Skipped:
		n.Skipped++
	}
}

// Snapshot copies the counters.
func (s *Stats) Snapshot() StatsSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// WrittenAt is the server's record of when obj was last written: the latest
// time in its managedFields, else its creation time, in whole seconds; false
// when it carries neither (the store drops managedFields: ask before).
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
