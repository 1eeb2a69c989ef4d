package stats

import (
	"testing"

	"rawwatch/observe"
	"rawwatch/watcher"
)

// A Counter counts every event it is told of by what it is, and the events
// received by their type: two lists (the second one a relist that found one
// object gone) of three pages in all, a watch of two ADDED, one MODIFIED and
// three DELETED events, a bookmark, a backoff, a probe, a skipped item and
// an object outside the shard; a change of state counts nowhere.
func TestACounterCountsEveryEvent(t *testing.T) {
	var s Counter
	for _, e := range []observe.Event{
		watcher.ListPage{}, watcher.Replaced{}, watcher.ListPage{}, watcher.ListPage{}, watcher.Replaced{Deleted: 1},
		watcher.WatchStarted{},
		watcher.Received{Type: watcher.Added}, watcher.Received{Type: watcher.Added}, watcher.Received{Type: watcher.Modified},
		watcher.Received{Type: watcher.Deleted}, watcher.Received{Type: watcher.Deleted}, watcher.Received{Type: watcher.Deleted},
		watcher.BookmarkReceived{RV: "7"},
		watcher.BackoffStarted{}, watcher.Probed{}, watcher.Skipped{},
		watcher.StateChanged{},
	} {
		s.Observe(e)
	}
	want := Counts{ListPages: 3, Lists: 2, Relists: 1, Watches: 1, Events: 6, Added: 2, Modified: 1, Deleted: 3,
		Bookmarks: 1, GoneDeletes: 1, Skipped: 1, Backoffs: 1, Probes: 1, LastBookmarkRV: "7"}
	if got := s.Counts(); got != want {
		t.Errorf("counts\n got %+v\nwant %+v", got, want)
	}
}
