package explain

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"rawwatch/leader"
	"rawwatch/queue"
	"rawwatch/reconcile"
	"rawwatch/ring"
	"rawwatch/shard"
	"rawwatch/sharding"
	"rawwatch/store"
	"rawwatch/watcher"
)

// clock advances one millisecond per reading, from 12:00:00.
func clock() func() time.Time {
	t := time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC)
	return func() time.Time { t = t.Add(time.Millisecond); return t }
}

// story plays, in the order the real loop makes them, the calls of a first
// list, a watch, the queue and workers, a bookmark, a closed stream, a 410
// and its relist, a failure with backoff, and a change of leader.
func story(n *Narrator) {
	n.Observe(leader.NewLeader{Identity: "other-pod"})
	n.Observe(watcher.ListPage{Page: 1, Items: 2, Continue: "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTIzfQ", RV: ""})
	n.Observe(watcher.ListPage{Page: 2, Items: 1, Continue: "", RV: "100"})
	n.Observe(watcher.Replaced{RV: "100", Size: 3, Added: 3, Updated: 0, Deleted: 0})
	n.Observe(watcher.Handed{Type: store.Added, Key: "default/a", FinalStateUnknown: false})
	n.Observe(queue.Added{Key: "default/a", Deduped: false})
	n.Observe(watcher.StateChanged{From: watcher.Listing, To: watcher.Watching, Reason: "listed at resourceVersion 100"})
	n.Observe(watcher.WatchStarted{RV: "100", Timeout: 7 * time.Minute, InitialEvents: false})
	n.Observe(leader.Leading{Identity: "this-pod", Leading: true})
	n.Observe(queue.Got{Key: "default/a", Waited: 3 * time.Millisecond})
	n.Observe(reconcile.Started{Worker: 0, Key: "default/a"})
	n.Observe(watcher.Received{Type: watcher.Modified, Key: "default/a", RV: "101"})
	n.Observe(watcher.Handed{Type: store.Updated, Key: "default/a", FinalStateUnknown: false}) // a watch event's delta: not narrated again
	n.Observe(queue.Added{Key: "default/a", Deduped: false})                                   // while a worker holds it
	n.Observe(queue.Added{Key: "default/a", Deduped: true})
	n.Observe(reconcile.Finished{Worker: 0, Key: "default/a", Took: 2 * time.Millisecond, Err: nil, RetryIn: 0})
	n.Observe(reconcile.Started{Worker: 1, Key: "default/broken"})
	n.Observe(reconcile.Finished{Worker: 1, Key: "default/broken", Took: time.Millisecond, Err: errors.New(`spec.message is "fail"`), RetryIn: 10 * time.Millisecond})
	n.Observe(reconcile.Started{Worker: 1, Key: "default/a"})
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "example.com", Resource: "myresources"}, "a", errors.New("stale"))
	n.Observe(reconcile.Finished{Worker: 1, Key: "default/a", Took: time.Millisecond, Err: conflict, RetryIn: 5 * time.Millisecond})
	n.Observe(watcher.BookmarkReceived{RV: "150", InitialEventsEnd: false})
	n.Observe(watcher.WatchEnded{Frames: 3, Open: 5 * time.Minute, Err: nil})
	n.Observe(watcher.StateChanged{From: watcher.Watching, To: watcher.Watching, Reason: "watch ended after 3 events: re-watch from resourceVersion 150"})
	n.Observe(watcher.WatchStarted{RV: "150", Timeout: 6 * time.Minute, InitialEvents: false})
	n.Observe(watcher.Received{Type: watcher.Deleted, Key: "default/b", RV: "151"})
	gone := errors.New("too old resource version: 151 (300)")
	n.Observe(watcher.WatchEnded{Frames: 0, Open: 2 * time.Second, Err: gone})
	n.Observe(watcher.StateChanged{From: watcher.Watching, To: watcher.Relisting, Reason: "resourceVersion 151 expired (too old resource version: 151 (300)): relist"})
	n.Observe(watcher.ListPage{Page: 1, Items: 2, Continue: "", RV: "310"})
	n.Observe(watcher.Replaced{RV: "310", Size: 2, Added: 1, Updated: 0, Deleted: 1})
	n.Observe(watcher.Handed{Type: store.Deleted, Key: "default/c", FinalStateUnknown: true})
	n.Observe(queue.Added{Key: "default/c", Deduped: false})
	n.Observe(watcher.StateChanged{From: watcher.Relisting, To: watcher.Watching, Reason: "listed at resourceVersion 310"})
	n.Observe(watcher.WatchStarted{RV: "310", Timeout: 8 * time.Minute, InitialEvents: false})
	n.Observe(watcher.WatchEnded{Frames: 0, Open: 0, Err: errors.New("connection refused")})
	n.Observe(watcher.StateChanged{From: watcher.Watching, To: watcher.BackingOff, Reason: "watch failed (transient): connection refused"})
	n.Observe(watcher.BackoffStarted{Delay: 1600 * time.Millisecond, Class: watcher.Transient})
	n.Observe(watcher.StateChanged{From: watcher.BackingOff, To: watcher.Watching, Reason: "waited 1.6s"})
	n.Observe(watcher.Skipped{Err: &watcher.SkipError{What: "MODIFIED event", Key: "default/bad", Err: errors.New("spec: expected object")}})
	n.Observe(leader.Leading{Identity: "this-pod", Leading: false})
	n.Observe(watcher.StateChanged{From: watcher.Watching, To: watcher.Stopped, Reason: "stopped"})
}

const want = `12:00:00.001 LEASE     held by other-pod
             ↳ Only the replica holding the Lease reconciles; the others watch (their cache stays warm)
             ↳ and take over when the holder stops renewing it.
12:00:00.002 LIST      page 1: 2 items, continue token "eyJ2IjoibWV0YS5r…" → next page
             ↳ A paginated LIST: each page has at most --page-size items and a continue token for the next;
             ↳ all pages are read from one snapshot, whose resourceVersion the last page reports.
12:00:00.003 LIST      page 2: 1 item, last page: the list is at resourceVersion 100
12:00:00.004 SYNCED    the store holds 3 objects at resourceVersion 100 (3 Added deltas)
             ↳ The cache is now a faithful copy of the cluster. From here on it changes only through watch events.
12:00:00.005 DELTA       Added default/a
             ↳ A change the (re)list found. Deleted deltas marked FinalStateUnknown are objects that vanished
             ↳ while we were not watching (client-go's DeletedFinalStateUnknown).
12:00:00.006 ENQUEUE   default/a
             ↳ The queue holds keys, not objects: a worker reads the latest object from the store when it
             ↳ gets there, so ten changes while a key waits cost one reconcile.
12:00:00.007 WATCH     from resourceVersion 100 (bookmarks on; the server ends it after 7m0s)
             ↳ The server streams every change made after that resourceVersion, in order;
             ↳ each event moves our resourceVersion forward, so we always know where to resume.
12:00:00.008 LEADER    this replica (this-pod) holds the lease: the workers start
12:00:00.009 WORKER 0  picks default/a (waited 3ms in the queue)
             ↳ A worker takes the oldest waiting key. No other worker can take this key until it is Done.
12:00:00.010 MODIFIED  default/a                           resourceVersion 101
12:00:00.011 ENQUEUE   default/a (being reconciled now: it runs once more when that is Done)
12:00:00.012 ENQUEUE   default/a (deduped: already waiting; one reconcile covers both)
12:00:00.013 DONE      worker 0 reconciled default/a in 2ms
12:00:00.014 WORKER 1  picks default/broken
12:00:00.015 RETRY     default/broken in 10ms: spec.message is "fail"
             ↳ The reconcile failed: the key comes back after a per-key delay that doubles with each failure
             ↳ (from --retry-base-delay), so a failing key does not crowd out the others.
12:00:00.016 WORKER 1  picks default/a
12:00:00.017 CONFLICT  default/a: the object changed since we read it; retry in 5ms
             ↳ 409 Conflict: the object changed after the version we read. The watch is bringing the new
             ↳ version; the retry will see it. Not an error worth a log line.
12:00:00.018 BOOKMARK  → resourceVersion 150 (no object changed)
             ↳ No object changed: the server says "you are up to date to here", so that a re-WATCH
             ↳ after a disconnect starts from a recent resourceVersion rather than an old, possibly compacted one.
12:00:00.019 CLOSED    the stream ended after 3 events, open 5m0s
             ↳ Watch streams end all the time (server timeouts, restarts, proxies). One that ran its course
             ↳ (its timeout, or two minutes without trouble) is resumed at once from the last resourceVersion;
             ↳ one that broke sooner, whatever it delivered first, waits a backoff first: no storm from a flapping proxy.
12:00:00.020 RE-WATCH  from resourceVersion 150 (bookmarks on; the server ends it after 6m0s)
             ↳ Resuming from the last resourceVersion we saw: nothing is listed again, nothing is missed.
12:00:00.021 DELETED   default/b                           resourceVersion 151
             ↳ The event carries the object's final state; the reconciler receives it with the key (a tombstone).
12:00:00.022 CLOSED    the stream ended after 0 events, open 2s: too old resource version: 151 (300)
12:00:00.023 410 GONE  resourceVersion 151 expired (too old resource version: 151 (300)): relist → RELIST
             ↳ The server no longer has the changes after our resourceVersion: etcd compacted them, or the
             ↳ apiserver restarted and its new watch cache starts later. Only a new LIST resynchronises the cache.
12:00:00.024 RELIST    page 1: 2 items, last page: the list is at resourceVersion 310
             ↳ A relist builds a new store beside the old one and swaps it in at once;
             ↳ comparing the two yields exactly the changes the broken watch missed.
12:00:00.025 REPLACED  the store, in one step, with 2 objects at resourceVersion 310: 1 added, 0 updated, 1 deleted, the rest unchanged (no delta)
12:00:00.026 DELTA       Deleted default/c (FinalStateUnknown: deleted while we were not watching; the last state we knew goes with it)
12:00:00.027 ENQUEUE   default/c
12:00:00.028 RE-WATCH  from resourceVersion 310 (bookmarks on; the server ends it after 8m0s)
12:00:00.029 CLOSED    the stream ended after 0 events, open 0s: connection refused
12:00:00.030 FAILED    watch failed (transient): connection refused
12:00:00.031 BACKOFF   wait 1.6s before retrying (transient error)
             ↳ Exponential backoff with jitter (first 0.8 to 1.6 s, as client-go's, doubling to a true 30 s cap), so failing
             ↳ clients do not hammer the server in step; a 429 waits at least its Retry-After.
12:00:00.032 SKIPPED   MODIFIED event for default/bad does not decode (spec: expected object): left out, the rest goes on
12:00:00.033 LEADER    this replica (this-pod) stopped leading: its workers have stopped
12:00:00.034 STOPPED   the watcher stopped
`

// The watchdog's line, and its hint once.
func TestNarrationOfTheWatchdog(t *testing.T) {
	var out bytes.Buffer
	n := New(&out, Options{Now: clock()})
	n.Observe(watcher.WatchEnded{Frames: 0, Open: 150 * time.Second, Err: watcher.ErrSilent})
	n.Observe(watcher.WatchEnded{Frames: 0, Open: 150 * time.Second, Err: watcher.ErrSilent})
	got := out.String()
	if c := strings.Count(got, "WATCHDOG  the stream sent nothing, not even a bookmark, for 2m30s"); c != 2 {
		t.Errorf("%d watchdog lines, want 2:\n%s", c, got)
	}
	if c := strings.Count(got, "half-dead connection"); c != 1 {
		t.Errorf("the watchdog's hint appears %d times, want once:\n%s", c, got)
	}
	// Abandoned after what was left of the limit, or silent since a frame:
	// the line says so, not that the stream alone was silent for all its time.
	out.Reset()
	n.Observe(watcher.WatchEnded{Frames: 0, Open: 30 * time.Second, Quiet: 2 * time.Minute, Err: watcher.ErrSilent})
	n.Observe(watcher.WatchEnded{Frames: 1, Open: 190 * time.Second, Err: watcher.ErrSilent})
	for _, want := range []string{"for 30s, the streams before it from the same resourceVersion for 2m0s: 2m30s in all", "after 1 frame (open 3m10s)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
}

func TestNarration(t *testing.T) {
	var out bytes.Buffer
	story(New(&out, Options{Now: clock()}))
	if got := out.String(); got != want {
		t.Errorf("narration differs; got:\n%s", got)
		gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Fatalf("first difference, line %d:\n got %q\nwant %q", i+1, gl[i], wl[i])
			}
		}
	}
}

// Colour only when asked: tags and timestamps get ANSI codes, text does not.
func TestColour(t *testing.T) {
	var plain, coloured bytes.Buffer
	story(New(&plain, Options{Now: clock()}))
	story(New(&coloured, Options{Now: clock(), Color: true}))
	if strings.Contains(plain.String(), "\x1b[") {
		t.Error("escape codes without Color")
	}
	for _, want := range []string{
		"\x1b[2m12:00:00.010\x1b[0m \x1b[33mMODIFIED \x1b[0m default/a",
		"\x1b[35m\x1b[1m410 GONE \x1b[0m resourceVersion 151",
		"\x1b[2m             ↳ The server no longer has the changes",
	} {
		if !strings.Contains(coloured.String(), want) {
			t.Errorf("coloured output lacks %q", want)
		}
	}
	if stripped := strings.NewReplacer("\x1b[0m", "", "\x1b[1m", "", "\x1b[2m", "", "\x1b[31m", "", "\x1b[32m", "",
		"\x1b[33m", "", "\x1b[34m", "", "\x1b[35m", "", "\x1b[36m", "").Replace(coloured.String()); stripped != plain.String() {
		t.Error("colour changed the text")
	}
}

// A list of many objects prints Burst example lines, then one summary when
// something else happens.
func TestLongRunsAreSummedUp(t *testing.T) {
	var out bytes.Buffer
	n := New(&out, Options{Now: clock(), Burst: 4})
	n.Observe(watcher.ListPage{Page: 1, Items: 25, Continue: "", RV: "7"})
	n.Observe(watcher.Replaced{RV: "7", Size: 25, Added: 25, Updated: 0, Deleted: 0})
	for i := range 25 {
		n.Observe(watcher.Handed{Type: store.Added, Key: fmt.Sprintf("ns/o-%d", i), FinalStateUnknown: false})
		n.Observe(queue.Added{Key: fmt.Sprintf("ns/o-%d", i), Deduped: false})
	}
	n.Observe(watcher.StateChanged{From: watcher.Listing, To: watcher.Watching, Reason: "listed"})
	n.Observe(watcher.WatchStarted{RV: "7", Timeout: time.Minute, InitialEvents: false})
	text := out.String()
	if c := strings.Count(text, "DELTA  ") + strings.Count(text, "ENQUEUE  "); c != 4 {
		t.Errorf("%d example lines, want 4:\n%s", c, text)
	}
	if !strings.Contains(text, "…         and 23 DELTA + 23 ENQUEUE lines more like these\n") {
		t.Errorf("no summary line:\n%s", text)
	}
	if strings.Index(text, "more like these") > strings.Index(text, "WATCH") {
		t.Errorf("the summary must come before the WATCH line:\n%s", text)
	}
}

// WatchList narration: the streamed initial state, and a server that
// refuses it (the loop lists again, this time with LIST).
func TestNarrationOfWatchList(t *testing.T) {
	var out bytes.Buffer
	n := New(&out, Options{Now: clock()})
	n.Observe(watcher.WatchStarted{RV: "", Timeout: 6 * time.Minute, InitialEvents: true})
	n.Observe(watcher.StateChanged{From: watcher.Listing, To: watcher.Listing, Reason: "server refused WatchList (bad request): falling back to paginated LIST"})
	n.Observe(watcher.ListPage{Page: 1, Items: 3, Continue: "", RV: "40"})
	n.Observe(watcher.Replaced{RV: "40", Size: 3, Added: 3, Updated: 0, Deleted: 0})
	n.Observe(watcher.WatchStarted{RV: "40", Timeout: 6 * time.Minute, InitialEvents: false})
	got := out.String()
	for _, want := range []string{
		"WATCH-LIST initial state streamed from the latest data (sendInitialEvents; the server ends it after 6m0s)",
		"↳ WatchList (--watch-list): instead of LIST pages",
		"LIST AGAIN server refused WatchList (bad request): falling back to paginated LIST",
		"WATCH     from resourceVersion 40",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("narration lacks %q:\n%s", want, got)
		}
	}
}

// A handoff, narrated step by step: a member joins, the old owner releases
// and gives up a slot, the new one claims and takes it; then a fence.
func TestNarrationOfTheHandoff(t *testing.T) {
	var out bytes.Buffer
	n := New(&out, Options{Now: clock()})
	n.Observe(ring.MembersChanged{Identity: "a", Members: []string{"a", "b"}, Before: []string{"a"}})
	all := shard.SlotsOf(0, 1, 2, 3)
	n.Observe(ring.ClaimsChanged{Identity: "a", Before: ring.Claims{Working: all, Target: all},
		Claims: ring.Claims{Working: shard.SlotsOf(0, 1), Releasing: shard.SlotsOf(2, 3), Target: shard.SlotsOf(0, 1)}})
	n.Observe(ring.ClaimsChanged{Identity: "a", Before: ring.Claims{Working: shard.SlotsOf(0, 1), Releasing: shard.SlotsOf(2, 3)},
		Claims: ring.Claims{Working: shard.SlotsOf(0, 1)}})
	n.Observe(ring.ClaimsChanged{Identity: "b", Claims: ring.Claims{Pending: shard.SlotsOf(2, 3)}})
	n.Observe(ring.ClaimsChanged{Identity: "b", Before: ring.Claims{Pending: shard.SlotsOf(2, 3)}, Claims: ring.Claims{Working: shard.SlotsOf(2, 3)}})
	// c, given slot 4 and no longer its share: custody, then taken.
	four := shard.SlotsOf(4)
	n.Observe(ring.ClaimsChanged{Identity: "c", Claims: ring.Claims{Pending: four, Custody: four}})
	n.Observe(ring.ClaimsChanged{Identity: "c", Before: ring.Claims{Pending: four, Custody: four}, Claims: ring.Claims{Releasing: four}})
	n.Observe(ring.ClaimsChanged{Identity: "c", Before: ring.Claims{Releasing: four}, Claims: ring.Claims{Lingering: four}})
	n.Observe(sharding.Resharded{Share: 0.5, Dropped: 12})
	n.Observe(sharding.Swept{Share: 0.25, Listed: 40, Deleted: 3})
	n.Observe(ring.ClaimsChanged{Identity: "b", Before: ring.Claims{Working: shard.SlotsOf(2, 3)}, Fenced: true})
	got := out.String()
	for _, want := range []string{
		"RING", "a sees the members [a b] (before: [a])",
		"RELEASE", "a stops reconciling slots 2-3",
		"GIVE UP", "a no longer claims slots 2-3",
		"CLAIM", "b claims slots 2-3 on its Lease",
		"TAKE", "b now reconciles slots 2-3",
		"CUSTODY", "c was given slots 4",
		"TAKE", "c claims slots 4 in custody",
		"LINGER", "c no longer covers slots 4 for itself",
		"RESHARD", "50.0% of the hash space: 12 objects",
		"SWEEP", "(25.0% of the hash space) were listed again before letting them go: 40 objects there, 3 in the store no longer on the server",
		"FENCED", "b could not renew its ring Lease in time",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the narration lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "c stops reconciling") {
		t.Errorf("a slot taken in custody narrated as one that stops being reconciled:\n%s", got)
	}
	if strings.Count(got, "GIVE UP") != 2 {
		t.Errorf("one slot given up twice:\n%s", got)
	}
}

// The PROBE line says whether the server is behind the store or not (it
// said "behind ours means ..." whatever the answer).
func TestProbeSaysWhetherTheServerIsBehind(t *testing.T) {
	for _, c := range []struct{ rv, ours, want string }{
		{"90", "100", "90, behind our 100: its history went back"},
		{"120", "100", "120, not behind our 100: its history did not go back"},
	} {
		var out strings.Builder
		n := New(&out, Options{})
		n.Observe(watcher.Probed{RV: c.rv, Ours: c.ours})
		if !strings.Contains(out.String(), c.want) {
			t.Errorf("server at %s, ours %s: %q; want it to say %q", c.rv, c.ours, out.String(), c.want)
		}
	}
}
