package watcher

import (
	"testing"

	"rawwatch/observe"
)

// Stats counts every event it is told of by what it is, and the events
// received by their type: two lists (the second one a relist that found one
// object gone) of three pages in all, a watch of two ADDED, one MODIFIED and
// three DELETED events, a bookmark, a backoff, a probe, a skipped item and
// an object outside the shard; a change of state counts nowhere.
func TestStatsCountEveryEvent(t *testing.T) {
	var s Stats
	for _, e := range []observe.Event{
		ListPage{}, Replaced{}, ListPage{}, ListPage{}, Replaced{Deleted: 1},
		WatchStarted{},
		Received{Type: Added}, Received{Type: Added}, Received{Type: Modified},
		Received{Type: Deleted}, Received{Type: Deleted}, Received{Type: Deleted},
		BookmarkReceived{RV: "7"},
		BackoffStarted{}, Probed{}, Skipped{},
		StateChanged{},
	} {
		s.Observe(e)
	}
	want := StatsSnapshot{ListPages: 3, Lists: 2, Relists: 1, Watches: 1, Events: 6, Added: 2, Modified: 1, Deleted: 3,
		Bookmarks: 1, GoneDeletes: 1, Skipped: 1, Backoffs: 1, Probes: 1, LastBookmarkRV: "7"}
	if got := s.Snapshot(); got != want {
		t.Errorf("snapshot\n got %+v\nwant %+v", got, want)
	}
}
