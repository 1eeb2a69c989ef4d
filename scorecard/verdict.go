package scorecard

import (
	"fmt"
	"time"
)

// The verdicts, worst first.
const (
	LostData = "lost data"
	Stormed  = "stormed"
	Stalled  = "stalled"
	Held     = "held"
)

// The thresholds, written down (docs/scorecard.md repeats them).
const (
	// StormPerMinute: a client that makes more LISTs and WATCHes than this
	// in a minute of a fault stormed. One a second: the raw watcher's
	// backoff allows at most 40 in any minute (chaos.requestBound), and
	// client-go's reflector (the same waits, 800 ms to 1.6 s doubling) about as many; a
	// client with no backoff makes thousands.
	StormPerMinute = 60
	// DefaultRecover is how long after a fault's end a client has to show a
	// store equal to the server's before it counts as stalled.
	DefaultRecover = time.Minute
)

// Measure is what one client did under one fault.
type Measure struct {
	// Fault lasted Duration (as set: the verdict does not read clocks).
	Duration time.Duration
	// Lists (first pages: a LIST of many pages counts once), Pages (the
	// further pages), Watches and WatchLists (WATCHes with
	// sendInitialEvents, not counted in Watches) the client sent while the
	// fault lasted; Busiest is the most LISTs, WATCHes and WatchLists in any
	// minute of it.
	Lists, Pages, Watches, WatchLists int
	Busiest                           int
	// Converged: the client's store equalled the server's (every key, every
	// resourceVersion) ConvergedIn after the fault's end.
	Converged   bool
	ConvergedIn time.Duration
	// At the end (on convergence, or Recover after the fault): keys the
	// store lacked, held beyond the server's, held at another resourceVersion.
	Missing, Extra, Stale int
	// Deletions made during the fault, of objects still gone at the end
	// and known to the client's handler, that the handler never heard of
	// (read once it heard the canary, the last write: a lagging handler
	// is not a losing one).
	Undelivered int
	// EventsAfter: events the handler heard after the fault's end;
	// HeardCanary: among them, the canary's, one update the writer makes
	// right after the fault to an object nothing else touches: the client
	// is following the server again.
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
}

// Rate is the fault's LISTs, WATCHes and WatchLists a minute, on average
// over the fault (for the page; the verdict reads Busiest).
func (m Measure) Rate() float64 {
	n := float64(m.Lists + m.Watches + m.WatchLists)
	if m.Duration <= 0 {
		return n
	}
	return n * float64(time.Minute) / float64(m.Duration)
}

// Verdict judges m, worst first, and says why:
//
//   - lost data: a deletion never reached the handler although the store
//     converged (Undelivered: of objects the handler knew, read once it
//     caught up with the canary), or the store never converged although the client was
//     following the server again (its handler heard the canary, written
//     after the fault): it believes itself up to date and is not;
//   - stormed: more than StormPerMinute LISTs, WATCHes and WatchLists in
//     one minute of the fault (Busiest: in a fault shorter than a minute,
//     all of its requests). It counts requests, not time: a slow machine
//     makes a storm smaller, never a calm client stormier; and a short
//     fault is not scaled up, which would call a backoff's first, closer
//     retries a storm;
//   - stalled: the store did not converge within Recover and the handler
//     never heard the canary: the client stopped following;
//   - held: none of these.
func Verdict(m Measure) (string, string) {
	switch {
	case m.Converged && m.Undelivered > 0:
		return LostData, fmt.Sprintf("%d deletion(s) never delivered", m.Undelivered)
	case !m.Converged && m.HeardCanary:
		return LostData, fmt.Sprintf("following again (heard the canary) but %d missing, %d extra, %d stale", m.Missing, m.Extra, m.Stale)
	case m.Busiest > StormPerMinute:
		return Stormed, fmt.Sprintf("%d LISTs, WATCHes and WatchLists in one minute (bound %d)", m.Busiest, StormPerMinute)
	case !m.Converged:
		return Stalled, fmt.Sprintf("never heard the canary; %d missing, %d extra, %d stale", m.Missing, m.Extra, m.Stale)
	}
	return Held, ""
}
