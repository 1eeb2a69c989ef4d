package scorecard

import (
	"fmt"
	"strings"
	"time"
)

// The verdicts, worst first.
const (
	Crashed  = "crashed"
	LostData = "lost data"
	Stormed  = "stormed"
	Stalled  = "stalled"
	Held     = "held"
)

// Verdicts lists them, worst first.
var Verdicts = []string{Crashed, LostData, Stormed, Stalled, Held}

// The envelope a client's requests are held to, from the fault's start to
// the end of its recovery (docs/scorecard.md repeats it). A retry is a
// request sent after one that failed (but one of another sort sent at once,
// within FallbackGap: the next step, a LIST after a WatchList that failed);
// its wait is the time between the two. A request of the same sort as the
// one sent before it, which did not fail, is that request asked again: its
// wait, from that one's start, is judged as a retry's (pace), so that a
// burst is judged by its own spacing, never by an average over the window.
// Any backoff that doubles its wait at least every other retry from 0.4 s,
// up to 10 s or more, stays inside, whatever its jitter (client-go's
// reflector and the raw watcher wait 0.8 to 1.6 s, doubling every retry, up
// to 30 s); a client that retries at a fixed interval leaves it after a few
// retries, however long the interval, up to the cap.
const (
	// FreeRetries may come at once: a relist the server asked for (a 410),
	// a fall back from WatchList to LIST.
	FreeRetries = 2
	// Beyond them, the n-th shortest wait must be at least EnvelopeBase
	// doubled every RetriesPerDoubling, up to EnvelopeCap.
	EnvelopeBase       = 400 * time.Millisecond
	RetriesPerDoubling = 2
	EnvelopeCap        = 10 * time.Second
	// FallbackGap: a request of another sort than the one that failed, sent
	// sooner than this after it, is its next step, not a retry.
	FallbackGap = 250 * time.Millisecond
	// A retry that waited at least the Retry-After its failure asked for is
	// as asked, inside the envelope whatever its wait.
	//
	// Chained requests (sent after one that succeeded, or beside one in
	// flight: a LIST's WATCH, its further pages) may number ChainsPerRetry
	// for each retry and ChainSlack more: a client that asks again at once
	// whenever a stream ends cleanly, forever, chains thousands.
	ChainsPerRetry = 3
	ChainSlack     = 10
	// DefaultRecover is how long after a fault's end a client has to show a
	// store equal to the server's and its handler the canary.
	DefaultRecover = time.Minute
	// Grace: the client is watched this long after its recovery (its
	// requests counted, a crash seen), and must still answer at its end.
	Grace = 10 * time.Second
)

// Envelope is the shortest wait the n-th shortest retry (from 1) may have.
func Envelope(n int) time.Duration {
	if n <= FreeRetries {
		return 0
	}
	d := EnvelopeBase << ((n - FreeRetries - 1) / RetriesPerDoubling)
	if d > EnvelopeCap || d <= 0 {
		return EnvelopeCap
	}
	return d
}

// Measure is what one client did under one fault.
type Measure struct {
	// Fault lasted Duration (as set: the verdict does not read clocks).
	Duration time.Duration
	// Window is the time from the fault's start to Grace after the end of
	// the client's recovery (its store equal to the server's and its
	// handler at the canary's resourceVersion, or the recovery window's
	// end): the requests are counted over it.
	Window time.Duration
	// Every request the client sent in Window, by sort: LISTs (first
	// pages), further pages, WATCHes, WatchLists (WATCHes with
	// sendInitialEvents), and others (GETs of one object, discovery);
	// Busiest, the most in any minute of it.
	Lists, Pages, Watches, WatchLists, Others int
	Busiest                                   int
	// How they were spaced (pace): the waits the envelope judges (before
	// a retry, or a request asked again), shortest first; the retries that
	// waited as their Retry-After asked; the chained requests.
	Waits   []time.Duration
	AsAsked int
	Chained int
	// Converged: the client's store equalled the server's (every key, every
	// resourceVersion) ConvergedIn after the fault's end.
	Converged   bool
	ConvergedIn time.Duration
	// At the end (on recovery, or at the recovery window's end): keys the
	// store lacked, held beyond the server's, held at another resourceVersion.
	Missing, Extra, Stale int
	// What the handler last heard of each key, against the server at the
	// end (read once the handler heard the canary, or at the window's
	// end), over every key the server holds or the handler heard of:
	// NotHeard, keys the server holds whose last word the handler never
	// heard (a create or update lost, a resurrected object never re-added);
	// HeardStale, keys whose last word the handler heard at another
	// resourceVersion; HeardExtra, keys the server no longer holds whose
	// deletion the handler never heard (a deletion lost, an object that
	// vanished in a restore), Ghosts among them: re-ADDed after the
	// handler heard them deleted.
	NotHeard, HeardStale, HeardExtra, Ghosts int
	// EventsAfter: events the handler heard after the fault's end;
	// HeardCanary: among them, the canary at its resourceVersion (one
	// update the writer makes right after the fault to an object nothing
	// else touches): the client follows the server again.
	EventsAfter int
	HeardCanary bool
	// CanaryIn: from the canary's write to its reaching the handler (a
	// slow handler's backlog drains first).
	CanaryIn time.Duration
	// HeapGrowth: the most the client's heap in use grew, while the fault
	// lasted, over its value when the fault began (bytes; sampled every
	// 250 ms); MostQueued: the most keys waiting in its workqueue then.
	HeapGrowth int64
	MostQueued int
	// Initial: the fault began before the client started; Synced and
	// SyncedIn: it made its initial sync, that long after its start.
	Initial  bool
	Synced   bool
	SyncedIn time.Duration
	// Crashed: the client's process ended before it was told to stop;
	// Exit is what it said last (or, Hung, what it failed to answer).
	Crashed bool
	Exit    string `json:",omitempty"`
	// Hung: the client's process stopped answering (for AnswerTimeout)
	// without ending.
	Hung bool `json:",omitempty"`
}

// Requests is every request counted.
func (m Measure) Requests() int { return m.Lists + m.Pages + m.Watches + m.WatchLists + m.Others }

// Retries is every retry: judged by the envelope, or as asked.
func (m Measure) Retries() int { return len(m.Waits) + m.AsAsked }

// Following: the client showed the server's state (its store converged),
// or its handler heard the canary, the last write: it believes itself up
// to date.
func (m Measure) Following() bool { return m.Converged || m.HeardCanary }

// Verdict judges m, worst first, and says why:
//
//   - crashed: the client's process ended on its own;
//   - lost data: the client is following (Following) and yet its store
//     differs from the server's, or its handler's last word on a key does
//     (a create, update or delete it never heard, a ghost re-ADD, an
//     object that vanished or came back in a restore);
//   - stormed: its requests left the envelope: a retry came sooner than
//     Envelope allows, or it chained more requests than ChainsPerRetry
//     per retry and ChainSlack. It judges the spacing, not the rate: a
//     slow machine makes waits longer, never a calm client stormier;
//   - stalled: not following within the recovery window, or hung: its
//     process there and answering nothing (its store, its handler, its
//     stop) for AnswerTimeout;
//   - held: none of these.
func Verdict(m Measure) (string, string) {
	switch {
	case m.Crashed:
		return Crashed, "the client's process ended: " + m.Exit
	case m.Following() && m.Missing+m.Extra+m.Stale > 0:
		return LostData, fmt.Sprintf("following again (heard the canary) but its store has %d missing, %d extra, %d stale", m.Missing, m.Extra, m.Stale)
	case m.Following() && m.NotHeard+m.HeardStale+m.HeardExtra > 0:
		return LostData, "the handler's last word differs from the server: " + heardWhy(m)
	}
	if why, ok := stormed(m); ok {
		return Stormed, why
	}
	if m.Hung {
		return Stalled, "stopped answering, its process still there: " + m.Exit
	}
	if !m.Following() {
		return Stalled, fmt.Sprintf("never heard the canary at its resourceVersion; store: %d missing, %d extra, %d stale", m.Missing, m.Extra, m.Stale)
	}
	return Held, ""
}

func heardWhy(m Measure) string {
	var parts []string
	for _, c := range []struct {
		n    int
		what string
	}{
		{m.NotHeard, "never heard as the server holds it"},
		{m.HeardStale, "heard at another resourceVersion"},
		{m.HeardExtra - m.Ghosts, "deletion never heard"},
		{m.Ghosts, "re-ADDed after its deletion (ghost)"},
	} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	return strings.Join(parts, ", ")
}

// stormed: the first retry whose wait is shorter than the envelope allows,
// or too many chained requests.
func stormed(m Measure) (string, bool) {
	for i, w := range m.Waits {
		if env := Envelope(i + 1); w < env {
			return fmt.Sprintf("%d retries; the %s shortest waited %v, the envelope asks %v (%d as Retry-After asked)",
				m.Retries(), ordinal(i+1), w.Round(time.Millisecond), env, m.AsAsked), true
		}
	}
	if bound := ChainsPerRetry*(m.Retries()+1) + ChainSlack; m.Chained > bound {
		return fmt.Sprintf("%d requests chained at once after one that succeeded, for %d retries (bound %d)", m.Chained, m.Retries(), bound), true
	}
	return "", false
}

func ordinal(n int) string {
	switch {
	case n%100 >= 11 && n%100 <= 13:
		return fmt.Sprintf("%dth", n)
	case n%10 == 1:
		return fmt.Sprintf("%dst", n)
	case n%10 == 2:
		return fmt.Sprintf("%dnd", n)
	case n%10 == 3:
		return fmt.Sprintf("%drd", n)
	}
	return fmt.Sprintf("%dth", n)
}
