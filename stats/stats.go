// Package stats counts what a watcher did, from the events it reports: a
// Counter is an observe.Observer to set as (or beside) the watcher's
// Options.Observer. The harnesses, the chaos verdict and the tests read it.
package stats

import (
	"sync"

	"rawwatch/observe"
	"rawwatch/watcher"
)

// Counter counts a watcher's events. The zero value is ready to use.
type Counter struct {
	mu sync.Mutex
	n  Counts
}

// Counts is a copy of the counters at one moment.
type Counts struct {
	// ListPages is the number of LIST requests that returned a page.
	ListPages int64
	// Lists counts completed lists, the first included; Relists the later ones.
	Lists, Relists int64
	// Watches is the number of WATCH requests made.
	Watches int64
	// Events counts the object events applied, and by type.
	Events, Added, Modified, Deleted int64
	// Bookmarks counts bookmarks; LastBookmarkRV is the last one's.
	Bookmarks      int64
	LastBookmarkRV string
	// GoneDeletes counts the Deleted deltas of lists.
	GoneDeletes int64
	// Skipped counts events and list items that could not be decoded.
	Skipped int64
	// Backoffs counts waits before a retry, Probes the probes.
	Backoffs, Probes int64
}

// Observe counts e.
func (c *Counter) Observe(e observe.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := &c.n
	switch e := e.(type) {
	case watcher.ListPage:
		n.ListPages++
	case watcher.Replaced:
		if n.Lists++; n.Lists > 1 {
			n.Relists++
		}
		n.GoneDeletes += int64(e.Deleted)
	case watcher.WatchStarted:
		n.Watches++
	case watcher.Received:
		n.Events++
		switch e.Type {
		case watcher.Added:
			n.Added++
		case watcher.Modified:
			n.Modified++
		case watcher.Deleted:
			n.Deleted++
		}
	case watcher.BookmarkReceived:
		n.Bookmarks++
		n.LastBookmarkRV = e.RV
	case watcher.BackoffStarted:
		n.Backoffs++
	case watcher.Probed:
		n.Probes++
	case watcher.Skipped:
		n.Skipped++
	}
}

// Counts copies the counters.
func (c *Counter) Counts() Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}
