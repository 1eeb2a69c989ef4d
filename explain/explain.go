// Package explain narrates, for someone learning how informers work, every
// mechanic of the controller as it happens (rawwatch --explain):
//
//	14:02:11.204 LIST      page 1: 2 items, continue token "eyJ2IjoibWV0YS5r…" → next page
//	14:02:11.209 LIST      page 2: 1 item, last page: the list is at resourceVersion 2711
//	14:02:11.209 SYNCED    the store holds 3 objects at resourceVersion 2711 (3 Added deltas)
//	14:02:11.209 DELTA       Added default/hello
//	14:02:11.209 ENQUEUE   default/hello
//	14:02:11.210 WATCH     from resourceVersion 2711 (bookmarks on; the server ends it after 7m12s)
//	14:02:11.230 WORKER 0  picks default/hello (waited 21ms in the queue)
//	14:02:11.236 DONE      worker 0 reconciled default/hello in 6ms
//	14:02:11.240 MODIFIED  default/hello                       resourceVersion 2712
//
// The first time a kind of line appears, an indented hint below it says why
// it happens. Colour is used only when asked for (UseColor decides that for a
// terminal).
//
// Narrator is an observe.Observer, like package metrics: it hears the events
// of the watcher, the queue, the workers and leader election. It is pure: it
// only writes lines to an io.Writer, so its tests feed it events and read the
// text.
package explain

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	"rawwatch/leader"
	"rawwatch/observe"
	"rawwatch/queue"
	"rawwatch/reconcile"
	"rawwatch/ring"
	"rawwatch/shard"
	"rawwatch/sharding"
	"rawwatch/store"
	"rawwatch/watcher"
)

// Options tune a Narrator.
type Options struct {
	// Color turns on ANSI colours.
	Color bool
	// Now gives the time printed on each line (default time.Now).
	Now func() time.Time
	// Burst is how many DELTA or ENQUEUE lines in a row are printed before
	// the rest of the run is summed up in one line (default 10): a list of
	// ten thousand objects is worth a few example lines, not ten thousand.
	Burst int
}

// UseColor reports whether colour suits f: a terminal, with NO_COLOR unset
// (https://no-color.org) and TERM not "dumb".
func UseColor(f *os.File) bool {
	return term.IsTerminal(int(f.Fd())) && os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb"
}

// Narrator writes the narration. It is safe for concurrent use.
type Narrator struct {
	w    io.Writer
	opts Options

	mu         sync.Mutex
	hinted     map[string]bool
	lists      int                      // completed lists
	inReplace  bool                     // between Replaced and the next state change
	afterClose bool                     // the last stream ended; the next WATCH resumes it
	waited     map[string]time.Duration // key → how long it waited in the queue
	busy       map[string]bool          // keys being reconciled
	run        int                      // consecutive DELTA/ENQUEUE lines
	hidden     map[string]int           // ...of which left out, by tag
}

// New returns a Narrator writing to w.
func New(w io.Writer, opts Options) *Narrator {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Burst == 0 {
		opts.Burst = 10
	}
	return &Narrator{w: w, opts: opts, hinted: map[string]bool{}, waited: map[string]time.Duration{},
		busy: map[string]bool{}, hidden: map[string]int{}}
}

const (
	reset   = "\x1b[0m"
	bold    = "\x1b[1m"
	dim     = "\x1b[2m"
	red     = "\x1b[31m"
	green   = "\x1b[32m"
	yellow  = "\x1b[33m"
	blue    = "\x1b[34m"
	magenta = "\x1b[35m"
	cyan    = "\x1b[36m"
)

// colours of the tags; tags not listed are printed plain.
var colours = map[string]string{
	"LIST": blue, "RELIST": magenta + bold, "SYNCED": blue + bold, "REPLACED": magenta + bold,
	"WATCH": blue, "RE-WATCH": blue, "CLOSED": cyan, "BOOKMARK": cyan,
	"ADDED": green, "MODIFIED": yellow, "DELETED": red,
	"410 GONE": magenta + bold, "LIST AGAIN": magenta, "WATCH-LIST": blue, "WATCHDOG": magenta, "FAILED": red, "BACKOFF": red, "SKIPPED": red,
	"RETRY": yellow, "CONFLICT": yellow, "DONE": green, "LEADER": green + bold, "LEASE": cyan,
}

// hints explain a kind of line, once.
var hints = map[string]string{
	"LIST": "A paginated LIST: each page has at most --page-size items and a continue token for the next;\n" +
		"all pages are read from one snapshot, whose resourceVersion the last page reports.",
	"RELIST": "A relist builds a new store beside the old one and swaps it in at once;\n" +
		"comparing the two yields exactly the changes the broken watch missed.",
	"SYNCED": "The cache is now a faithful copy of the cluster. From here on it changes only through watch events.",
	"WATCH": "The server streams every change made after that resourceVersion, in order;\n" +
		"each event moves our resourceVersion forward, so we always know where to resume.",
	"RE-WATCH": "Resuming from the last resourceVersion we saw: nothing is listed again, nothing is missed.",
	"WATCH-LIST": "WatchList (--watch-list): instead of LIST pages, the server streams every object as an ADDED event,\n" +
		"then a BOOKMARK marked k8s.io/initial-events-end; the store is replaced there, and the same stream\n" +
		"goes on with live events. One object in flight at a time instead of a whole page.",
	"ADDED":   "Applied to the store first; then the key (not the object) goes to the queue.",
	"DELETED": "The event carries the object's final state; the reconciler receives it with the key (a tombstone).",
	"BOOKMARK": "No object changed: the server says \"you are up to date to here\", so that a re-WATCH\n" +
		"after a disconnect starts from a recent resourceVersion rather than an old, possibly compacted one.",
	"CLOSED": "Watch streams end all the time (server timeouts, restarts, proxies). One that ran its course\n" +
		"(its timeout, or two minutes without trouble) is resumed at once from the last resourceVersion;\n" +
		"one that broke sooner, whatever it delivered first, waits a backoff first: no storm from a flapping proxy.",
	"WATCHDOG": "A stream can stay open and deliver nothing: a half-dead connection, a stuck proxy. The server\n" +
		"bookmarks about every minute, so silence for much longer means the stream is dead; resuming costs nothing.",
	"410 GONE": "The server no longer has the changes after our resourceVersion: etcd compacted them, or the\n" +
		"apiserver restarted and its new watch cache starts later. Only a new LIST resynchronises the cache.",
	"DELTA": "A change the (re)list found. Deleted deltas marked FinalStateUnknown are objects that vanished\n" +
		"while we were not watching (client-go's DeletedFinalStateUnknown).",
	"BACKOFF": "Exponential backoff with jitter (first 0.8 to 1.6 s, as client-go's, doubling to a true 30 s cap), so failing\n" +
		"clients do not hammer the server in step; a 429 waits at least its Retry-After.",
	"ENQUEUE": "The queue holds keys, not objects: a worker reads the latest object from the store when it\n" +
		"gets there, so ten changes while a key waits cost one reconcile.",
	"WORKER": "A worker takes the oldest waiting key. No other worker can take this key until it is Done.",
	"RETRY": "The reconcile failed: the key comes back after a per-key delay that doubles with each failure\n" +
		"(from --retry-base-delay), so a failing key does not crowd out the others.",
	"CONFLICT": "409 Conflict: the object changed after the version we read. The watch is bringing the new\n" +
		"version; the retry will see it. Not an error worth a log line.",
	"LEASE": "Only the replica holding the Lease reconciles; the others watch (their cache stays warm)\n" +
		"and take over when the holder stops renewing it.",
}

// line writes one narration line (and its hint, the first time).
func (n *Narrator) line(tag, format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lineLocked(tag, format, args...)
}

func (n *Narrator) lineLocked(tag, format string, args ...any) {
	burst := tag == "DELTA" || tag == "ENQUEUE"
	if !burst {
		n.flushLocked()
	} else if n.run++; n.run > n.opts.Burst {
		n.hidden[tag]++
		return
	}
	n.print(tag, fmt.Sprintf(format, args...))
	kind := tag
	if _, ok := hints[kind]; !ok { // "WORKER 1" is a WORKER line
		kind, _, _ = strings.Cut(tag, " ")
	}
	if h, ok := hints[kind]; ok && !n.hinted[kind] {
		n.hinted[kind] = true
		for _, l := range strings.Split(h, "\n") {
			n.write(strings.Repeat(" ", 13)+"↳ "+l, dim)
		}
	}
}

// flushLocked ends a run of DELTA/ENQUEUE lines, summing up what it left out.
func (n *Narrator) flushLocked() {
	n.run = 0
	if len(n.hidden) == 0 {
		return
	}
	var parts []string
	for _, tag := range []string{"DELTA", "ENQUEUE"} {
		if c := n.hidden[tag]; c > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c, tag))
		}
	}
	n.hidden = map[string]int{}
	n.print("…", "and "+strings.Join(parts, " + ")+" lines more like these")
}

func (n *Narrator) print(tag, text string) {
	ts := n.opts.Now().Format("15:04:05.000")
	padded := fmt.Sprintf("%-9s", tag)
	if n.opts.Color {
		if c, ok := colours[tag]; ok {
			padded = c + padded + reset
		}
		ts = dim + ts + reset
	}
	fmt.Fprintf(n.w, "%s %s %s\n", ts, padded, text)
}

func (n *Narrator) write(s, colour string) {
	if n.opts.Color {
		s = colour + s + reset
	}
	fmt.Fprintln(n.w, s)
}

func plural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func short(token string) string {
	if len(token) > 16 {
		return token[:16] + "…"
	}
	return token
}

// Observe narrates an event (of packages watcher, queue, reconcile and
// leader; others are ignored).
func (n *Narrator) Observe(e observe.Event) {
	switch e := e.(type) {
	case watcher.StateChanged:
		n.stateChanged(e.From, e.To, e.Reason)
	case watcher.ListPage:
		n.listPage(e.Page, e.Items, e.Continue, e.RV)
	case watcher.Replaced:
		n.replaced(e.RV, e.Size, e.Added, e.Updated, e.Deleted)
	case watcher.Handed:
		n.delta(e.Type, e.Key, e.FinalStateUnknown)
	case watcher.WatchStarted:
		n.watchStarted(e.RV, e.Timeout, e.InitialEvents)
	case watcher.Received:
		n.eventReceived(e.Type, e.Key, e.RV)
	case watcher.BookmarkReceived:
		n.bookmarkReceived(e.RV, e.InitialEventsEnd)
	case watcher.WatchEnded:
		n.watchEnded(e.Frames, e.Open, e.Quiet, e.Err)
	case watcher.Probed:
		n.probed(e.RV, e.Ours, e.Err)
	case watcher.BackoffStarted:
		n.backingOff(e.Delay, e.Class)
	case watcher.Skipped:
		n.skipped(e.Err)
	case queue.Added:
		n.enqueued(e.Key, e.Deduped)
	case queue.Got:
		n.queueWait(e.Key, e.Waited)
	case reconcile.Started:
		n.started(e.Worker, e.Key)
	case reconcile.Finished:
		n.finished(e.Worker, e.Key, e.Took, e.Err, e.RetryIn)
	case reconcile.Paused:
		n.line("PAUSE", "%s: the server is away (%v); every worker waits %s, and %s goes back to the queue without a retry counted against it", e.Key, e.Err, e.For.Round(time.Millisecond), e.Key)
	case reconcile.Resynced:
		n.line("RESYNC", "this replica took over %d keys (it leads now, or their slots came to it): each goes to the queue", e.Keys)
	case leader.Leading:
		n.leading(e.Identity, e.Leading)
	case leader.NewLeader:
		n.newLeader(e.Identity)
	case sharding.Swept:
		if e.Err != nil {
			n.line("SWEEP", "listing the slots being handed over failed (%v): tried again; the slots stay claimed until it succeeds", e.Err)
			break
		}
		n.line("SWEEP", "the slots being handed over (%.1f%% of the hash space) were listed again before letting them go: %d objects there, %d in the store no longer on the server — deletions the watch had not brought yet, handled now (the new owner hears only of those after its own list)", 100*e.Share, e.Listed, e.Deleted)
	case sharding.Resharded:
		n.line("RESHARD", "the watcher now asks for %.1f%% of the hash space: %d objects whose slots moved to other replicas leave the store (no deletion: they still exist), then the new shard is listed", 100*e.Share, e.Dropped)
	case ring.MembersChanged:
		n.line("RING", "%s sees the members %v (before: %v): the %d slots are divided among them again", e.Identity, e.Members, e.Before, shard.Slots)
	case ring.ClaimsChanged:
		n.claims(e)
	}
}

// What the ring reports: the handoff of slots.
func (n *Narrator) claims(e ring.ClaimsChanged) {
	c, b := e.Claims, e.Before
	if e.Fenced {
		n.line("FENCED", "%s could not renew its ring Lease in time: it drops every claim and cancels its reconciles in flight, before the others may take its slots", e.Identity)
		return
	}
	if s := c.Pending.Minus(b.Pending); !s.Empty() {
		n.line("CLAIM", "%s claims slots %s on its Lease; it works them once a list made after that write shows no other replica claiming them", e.Identity, s)
	}
	if s := c.Working.Minus(b.Working); !s.Empty() {
		n.line("TAKE", "%s now reconciles slots %s: nobody else claims them", e.Identity, s)
	}
	if s := c.Custody.Minus(b.Custody); !s.Empty() {
		n.line("CUSTODY", "%s was given slots %s by their old owner, and claims them even though they are no longer its share (it kept their deletions; it handles them, then hands the slots on)", e.Identity, s)
	}
	if s := c.Lingering.Minus(b.Lingering); !s.Empty() {
		n.line("LINGER", "%s no longer covers slots %s for itself, and says so on its Lease; it keeps watching them (and their deletions) until their claimants have seen that", e.Identity, s)
	}
	if s := c.Releasing.Minus(b.Releasing).Minus(b.Pending); !s.Empty() {
		n.line("RELEASE", "%s stops reconciling slots %s (they belong to another replica now); it claims them, handling their deletions, until its reconciles in flight end and, once their new owner has listed them, it has swept them and the new owner's cache holds every object the sweep saw", e.Identity, s)
	}
	if s := c.Releasing.And(b.Pending); !s.Empty() {
		n.line("TAKE", "%s claims slots %s in custody: nobody else claims them; it handles the deletions it kept, then hands them on", e.Identity, s)
	}
	if s := b.Pending.Minus(c.Claimed()); !s.Empty() {
		n.line("WITHDRAW", "%s withdraws its claim of slots %s: another replica claims them too (or they are no longer its share)", e.Identity, s)
	}
	if s := b.Releasing.Minus(c.Claimed()); !s.Empty() {
		n.line("GIVE UP", "%s no longer claims slots %s: nothing of theirs is in flight and no deletion is left unhandled; it names their new owner on its Lease until that one has taken them", e.Identity, s)
	}
}

// What the watcher reports.

func (n *Narrator) stateChanged(from, to watcher.State, reason string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.inReplace = false
	switch {
	case to == watcher.Relisting && from == watcher.Watching:
		n.lineLocked("410 GONE", "%s → RELIST", reason)
	case to == from && (to == watcher.Relisting || to == watcher.Listing):
		n.lineLocked("LIST AGAIN", "%s", reason)
	case to == watcher.BackingOff:
		n.lineLocked("FAILED", "%s", reason)
	case to == watcher.Stopped:
		n.lineLocked("STOPPED", "the watcher stopped")
	}
}

func (n *Narrator) listPage(page, items int, continueToken, rv string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	tag := "LIST"
	if n.lists > 0 {
		tag = "RELIST"
	}
	if continueToken != "" {
		n.lineLocked(tag, "page %d: %s, continue token %q → next page", page, plural(items, "item"), short(continueToken))
	} else {
		n.lineLocked(tag, "page %d: %s, last page: the list is at resourceVersion %s", page, plural(items, "item"), rv)
	}
}

func (n *Narrator) replaced(rv string, size, added, updated, deleted int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.lists == 0 {
		n.lineLocked("SYNCED", "the store holds %s at resourceVersion %s (%d Added deltas)", plural(size, "object"), rv, added)
	} else {
		n.lineLocked("REPLACED", "the store, in one step, with %s at resourceVersion %s: %d added, %d updated, %d deleted, the rest unchanged (no delta)",
			plural(size, "object"), rv, added, updated, deleted)
	}
	n.lists++
	n.inReplace = true
}

// delta hears every change handed to the controller; only those a (re)list
// produced are narrated (a watch event has its own line already).
func (n *Narrator) delta(t store.DeltaType, key string, finalStateUnknown bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.inReplace {
		return
	}
	note := ""
	if finalStateUnknown {
		note = " (FinalStateUnknown: deleted while we were not watching; the last state we knew goes with it)"
	}
	n.lineLocked("DELTA", "  %s %s%s", t, key, note)
}

func (n *Narrator) watchStarted(rv string, timeout time.Duration, initialEvents bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if initialEvents {
		from := "the latest data"
		if rv != "" {
			from = "resourceVersion " + rv + " or newer"
		}
		n.lineLocked("WATCH-LIST", "initial state streamed from %s (sendInitialEvents; the server ends it after %s)", from, timeout)
		return
	}
	if n.afterClose {
		n.afterClose = false
		n.lineLocked("RE-WATCH", "from resourceVersion %s (bookmarks on; the server ends it after %s)", rv, timeout)
		return
	}
	n.lineLocked("WATCH", "from resourceVersion %s (bookmarks on; the server ends it after %s)", rv, timeout)
}

func (n *Narrator) eventReceived(eventType, key, rv string) {
	n.line(eventType, "%-35s resourceVersion %s", key, rv)
}

func (n *Narrator) bookmarkReceived(rv string, _ bool) {
	n.line("BOOKMARK", "→ resourceVersion %s (no object changed)", rv)
}

func (n *Narrator) watchEnded(events int, d, quiet time.Duration, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.afterClose = true
	if errors.Is(err, watcher.ErrSilent) {
		silence := fmt.Sprintf("for %s", d.Round(time.Second))
		switch {
		case events > 0:
			silence = fmt.Sprintf("after %s (open %s)", plural(events, "frame"), d.Round(time.Second))
		case quiet > 0:
			silence = fmt.Sprintf("for %s, the streams before it from the same resourceVersion for %s: %s in all", d.Round(time.Second), quiet.Round(time.Second), (quiet + d).Round(time.Second))
		}
		n.lineLocked("WATCHDOG", "the stream sent nothing, not even a bookmark, %s (the server bookmarks about every minute): abandoned; first ask the server where it is", silence)
		return
	}
	text := fmt.Sprintf("the stream ended after %s, open %s", plural(events, "event"), d.Round(time.Millisecond))
	if err != nil {
		text += ": " + err.Error()
	}
	n.lineLocked("CLOSED", "%s", text)
}

func (n *Narrator) probed(rv, ours string, err error) {
	const asked = "asked the server for its resourceVersion (a LIST of one item)"
	if err != nil {
		n.line("PROBE", "%s: %v", asked, err)
		return
	}
	if c, cerr := resourceversion.CompareResourceVersion(rv, ours); cerr == nil && c < 0 {
		n.line("PROBE", "%s: %s, behind our %s: its history went back (an etcd restore): relist", asked, rv, ours)
		return
	}
	n.line("PROBE", "%s: %s, not behind our %s: its history did not go back; re-watch from ours", asked, rv, ours)
}

func (n *Narrator) backingOff(delay time.Duration, class watcher.ErrorClass) {
	n.line("BACKOFF", "wait %s before retrying (%s error)", delay.Round(time.Millisecond), class)
}

func (n *Narrator) skipped(err *watcher.SkipError) {
	what := err.What
	if err.Key != "" {
		what += " for " + err.Key
	}
	n.line("SKIPPED", "%s does not decode (%v): left out, the rest goes on", what, err.Err)
}

// What the queue reports.

func (n *Narrator) enqueued(key string, deduped bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case deduped:
		n.lineLocked("ENQUEUE", "%s (deduped: already waiting; one reconcile covers both)", key)
	case n.busy[key]:
		n.lineLocked("ENQUEUE", "%s (being reconciled now: it runs once more when that is Done)", key)
	default:
		n.lineLocked("ENQUEUE", "%s", key)
	}
}

func (n *Narrator) queueWait(key string, d time.Duration) {
	n.mu.Lock()
	n.waited[key] = d
	n.mu.Unlock()
}

// What the workers report.

func (n *Narrator) started(worker int, key string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.busy[key] = true
	wait := ""
	if d, ok := n.waited[key]; ok {
		delete(n.waited, key)
		wait = fmt.Sprintf(" (waited %s in the queue)", roundSmall(d))
	}
	n.lineLocked(fmt.Sprintf("WORKER %d", worker), "picks %s%s", key, wait)
}

func (n *Narrator) finished(worker int, key string, d time.Duration, err error, retryIn time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.busy, key)
	switch {
	case err == nil:
		n.lineLocked("DONE", "worker %d reconciled %s in %s", worker, key, roundSmall(d))
	case apierrors.IsConflict(err):
		n.lineLocked("CONFLICT", "%s: the object changed since we read it; retry in %s", key, roundSmall(retryIn))
	default:
		n.lineLocked("RETRY", "%s in %s: %v", key, roundSmall(retryIn), err)
	}
}

// What leader election reports.

func (n *Narrator) leading(identity string, leading bool) {
	if leading {
		n.line("LEADER", "this replica (%s) holds the lease: the workers start", identity)
	} else {
		n.line("LEADER", "this replica (%s) stopped leading: its workers have stopped", identity)
	}
}

func (n *Narrator) newLeader(identity string) {
	n.line("LEASE", "held by %s", identity)
}

// roundSmall rounds a duration to a readable precision.
func roundSmall(d time.Duration) time.Duration {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond)
	case d < time.Second:
		return d.Round(100 * time.Microsecond)
	default:
		return d.Round(time.Millisecond)
	}
}
