package watcher

import (
	"sync"
	"sync/atomic"
	"time"
)

// Observer hears about every mechanic of the loop as it happens: the Stats
// counters, Prometheus metrics and --explain's narration are all observers.
// Calls come from the loop's goroutine, in order; an observer must be quick.
// Embed NopObserver to implement only some of the methods.
type Observer interface {
	// StateChanged: the machine moved (from may equal to, e.g. Watching→Watching).
	StateChanged(from, to State, reason string)
	// ListPage: one LIST page arrived, with items objects.
	ListPage(page, items int, continueToken, rv string)
	// Replaced: a (re)list was swapped into the store.
	Replaced(rv string, size, added, updated, deleted int)
	// WatchStarted: a WATCH request is being made.
	WatchStarted(rv string, timeout time.Duration, initialEvents bool)
	// EventReceived: an ADDED, MODIFIED or DELETED event was applied.
	EventReceived(eventType, key, rv string)
	// BookmarkReceived: a BOOKMARK moved the resourceVersion to rv.
	BookmarkReceived(rv string, initialEventsEnd bool)
	// WatchEnded: a stream closed after events frames, open for d.
	WatchEnded(events int, d time.Duration, err error)
	// BackingOff: the loop waits delay before retrying.
	BackingOff(delay time.Duration, class ErrorClass)
	// Skipped: an event or list item could not be decoded and was left out.
	Skipped(err *SkipError)
}

// NopObserver does nothing; embed it to write partial observers.
type NopObserver struct{}

func (NopObserver) StateChanged(State, State, string)        {}
func (NopObserver) ListPage(int, int, string, string)        {}
func (NopObserver) Replaced(string, int, int, int, int)      {}
func (NopObserver) WatchStarted(string, time.Duration, bool) {}
func (NopObserver) EventReceived(string, string, string)     {}
func (NopObserver) BookmarkReceived(string, bool)            {}
func (NopObserver) WatchEnded(int, time.Duration, error)     {}
func (NopObserver) BackingOff(time.Duration, ErrorClass)     {}
func (NopObserver) Skipped(*SkipError)                       {}

// Stats counts what the loop did. Every Watcher keeps one (see Watcher.Stats).
type Stats struct {
	NopObserver
	listPages, lists, relists  atomic.Int64
	watches, bookmarks, events atomic.Int64
	added, modified, deleted   atomic.Int64
	goneDeletes, skipped       atomic.Int64
	backoffs                   atomic.Int64
	mu                         sync.Mutex
	lastBookmarkRV             string
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
	// GoneDeletes counts Deleted deltas produced by relists (objects that
	// vanished while the watch was down).
	GoneDeletes int64
	// Skipped counts events and list items that could not be decoded.
	Skipped int64
	// Backoffs counts waits before a retry.
	Backoffs int64
	// LastBookmarkRV is the resourceVersion of the last bookmark.
	LastBookmarkRV string
}

func (s *Stats) ListPage(int, int, string, string) { s.listPages.Add(1) }

func (s *Stats) Replaced(_ string, _, _, _, deleted int) {
	if s.lists.Add(1) > 1 {
		s.relists.Add(1)
	}
	s.goneDeletes.Add(int64(deleted))
}

func (s *Stats) WatchStarted(string, time.Duration, bool) { s.watches.Add(1) }

func (s *Stats) EventReceived(t, _, _ string) {
	s.events.Add(1)
	switch t {
	case Added:
		s.added.Add(1)
	case Modified:
		s.modified.Add(1)
	case Deleted:
		s.deleted.Add(1)
	}
}

func (s *Stats) BookmarkReceived(rv string, _ bool) {
	s.bookmarks.Add(1)
	s.mu.Lock()
	s.lastBookmarkRV = rv
	s.mu.Unlock()
}

func (s *Stats) BackingOff(time.Duration, ErrorClass) { s.backoffs.Add(1) }
func (s *Stats) Skipped(*SkipError)                   { s.skipped.Add(1) }

// Snapshot copies the counters.
func (s *Stats) Snapshot() StatsSnapshot {
	s.mu.Lock()
	rv := s.lastBookmarkRV
	s.mu.Unlock()
	return StatsSnapshot{
		ListPages: s.listPages.Load(), Lists: s.lists.Load(), Relists: s.relists.Load(),
		Watches: s.watches.Load(), Events: s.events.Load(),
		Added: s.added.Load(), Modified: s.modified.Load(), Deleted: s.deleted.Load(),
		Bookmarks: s.bookmarks.Load(), GoneDeletes: s.goneDeletes.Load(),
		Skipped: s.skipped.Load(), Backoffs: s.backoffs.Load(), LastBookmarkRV: rv,
	}
}

// Observers fans every call out to several observers, in order: the watcher
// uses it for its own Stats, and an application for its metrics and narration.
type Observers []Observer

func (o Observers) StateChanged(from, to State, reason string) {
	for _, x := range o {
		x.StateChanged(from, to, reason)
	}
}
func (o Observers) ListPage(page, items int, cont, rv string) {
	for _, x := range o {
		x.ListPage(page, items, cont, rv)
	}
}
func (o Observers) Replaced(rv string, size, added, updated, deleted int) {
	for _, x := range o {
		x.Replaced(rv, size, added, updated, deleted)
	}
}
func (o Observers) WatchStarted(rv string, timeout time.Duration, initial bool) {
	for _, x := range o {
		x.WatchStarted(rv, timeout, initial)
	}
}
func (o Observers) EventReceived(t, key, rv string) {
	for _, x := range o {
		x.EventReceived(t, key, rv)
	}
}
func (o Observers) BookmarkReceived(rv string, end bool) {
	for _, x := range o {
		x.BookmarkReceived(rv, end)
	}
}
func (o Observers) WatchEnded(events int, d time.Duration, err error) {
	for _, x := range o {
		x.WatchEnded(events, d, err)
	}
}
func (o Observers) BackingOff(d time.Duration, c ErrorClass) {
	for _, x := range o {
		x.BackingOff(d, c)
	}
}
func (o Observers) Skipped(err *SkipError) {
	for _, x := range o {
		x.Skipped(err)
	}
}
