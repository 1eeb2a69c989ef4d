package chaos

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"rawwatch/api/v1alpha1"
	"rawwatch/client"
	"rawwatch/faultproxy"
	"rawwatch/internal/app"
	"rawwatch/ring"
	"rawwatch/shard"
	"rawwatch/store"
	"rawwatch/watcher"
)

// Verdict is what the checks found. Each list holds one line per problem;
// all empty means nothing was lost.
type Verdict struct {
	// Listed is the number of objects the fresh LIST returned.
	Listed int
	// StoreDiff: keys missing from the store, left over in it, or held at
	// another UID or resourceVersion than the server's; DiffKinds counts
	// them by kind.
	StoreDiff []string
	DiffKinds map[string]int
	// StaleStatus: objects whose status does not describe their generation.
	StaleStatus []string
	// UnseenDeletions: deletions the reconciler was never told about.
	UnseenDeletions []string
	// Invisible counts deletions no client could have seen: of objects
	// created and deleted while the watcher was between a broken watch and
	// the relist that followed. They are not losses.
	Invisible int
	// HandoffGap (sharded runs) counts deletions no replica could see, of
	// objects no replica ever had: created after the old owner's watch
	// position when it let their slot go, and deleted before the new
	// owner's list (which would have brought them). The sharded form of a
	// relist gap; not losses.
	HandoffGap int
	// Unclaimed (sharded runs): deletions the reconciler never saw, of an
	// object whose slot no replica claimed when it was deleted (its owner
	// had been killed or had fenced itself, and the new owner had not
	// listed the slot yet), or whose claimant fenced itself before it
	// handled them. A handoff loses nothing (the old owner sweeps, the new
	// one covers); a fence or a kill does: nobody replays those (a
	// controller that must act on every deletion uses a finalizer).
	// Counted, not failed.
	Unclaimed []string
	// UnclaimedWhy counts Unclaimed by cause: "killed", "fenced",
	// "let go" (its owner let it go and nobody claimed it yet), "never".
	UnclaimedWhy map[string]int
	// WithKilled (sharded runs): deletions the reconciler never saw, of an
	// object whose slot the killed replica worked when it was deleted, after
	// its watch last moved its store forward (it died behind, in a gap the
	// faults opened) or at most KilledLag before that (they waited in its
	// queue), or that reached it at all (a DELETED event; its gate held or
	// replayed it) and died with it. Counted, not failed; KilledLagMax is
	// the longest time such a deletion came before the kill.
	WithKilled   []string
	KilledLagMax time.Duration
	// Overlaps: keys (sharded runs: objects) reconciled by two workers at
	// once. SameName (sharded runs): times a deleted name's old object and
	// its re-created new one, in two shards, were handled at once.
	Overlaps []string
	SameName int
	// ChurnErrors: writes of the churner that failed (the run's own
	// bookkeeping is then in doubt, so they fail the run too).
	ChurnErrors []string
	// Budget: the watcher's requests while the faults lasted.
	Budget budget
}

// budget is the request budget's measure: the watcher's LISTs and WATCHes
// while the faults lasted, counted on its transport (so that refused
// connections count too); the most in any minute; and the bound its backoff
// allows in a minute (requestBound).
type budget struct {
	Requests       faultproxy.Rate
	Busiest, Bound int
}

// requestBound is the most LISTs and WATCHes a watcher with backoff b may
// make in any minute under faults: package watcher's bound, 45 with its
// default backoff. Between two waits come at most five requests (a WATCH
// that meets a 410, a WatchList that fails, the LIST instead, that LIST's
// restart after an expired continue token, the next WATCH), and the waits
// are at their shortest, (1-Jitter)·Initial·Factorⁿ up to (1-Jitter)·Max.
// n starts again at 0 only after b.ResetAfter without trouble, which holds
// a wait and a stream: a minute with r resets holds r such stretches, and
// its other waits come from r+1 climbs from n = 0, the shortest first. (The
// default backoff resets after 2 minutes: never twice in one.)
func requestBound(b watcher.Backoff) int {
	most := 0
	for r := 0; time.Duration(r)*b.ResetAfter < time.Minute; r++ {
		left := time.Minute - time.Duration(r)*b.ResetAfter
		var waits []time.Duration
		for n, climbed := 0, time.Duration(0); climbed <= left; n++ {
			d := b.Delay(n, 0.9999999) // the shortest the jitter makes it
			climbed += d
			for range r + 1 {
				waits = append(waits, d)
			}
		}
		slices.Sort(waits)
		k := 0
		for _, d := range waits {
			if left -= d; left < 0 {
				break
			}
			k++
		}
		most = max(most, 5*(k+r+1))
	}
	return most
}

// converged: everything the controller can still fix by catching up is fixed.
func (v Verdict) converged() bool {
	return len(v.StoreDiff) == 0 && len(v.StaleStatus) == 0 && len(v.UnseenDeletions) == 0
}

// Failures lists, one line per kind of loss, what the run found; empty means
// the verdict is PASS.
func (v Verdict) Failures() []string {
	var out []string
	add := func(what string, items []string) {
		if len(items) > 0 {
			out = append(out, fmt.Sprintf("%d %s: %s", len(items), what, sample(items)))
		}
	}
	add(fmt.Sprintf("differences between the store and a fresh LIST (%s)", kinds(v.DiffKinds)), v.StoreDiff)
	add("objects whose status is not at their generation", v.StaleStatus)
	add("deletions the reconciler never saw", v.UnseenDeletions)
	add("keys reconciled by two workers at once", v.Overlaps)
	add("failed churn writes", v.ChurnErrors)
	if b := v.Budget; b.Busiest > b.Bound {
		out = append(out, fmt.Sprintf("over the request budget: %d LISTs and WATCHes in one minute, bound %d", b.Busiest, b.Bound))
	}
	return out
}

// The kinds of difference between the store and the server.
const (
	diffMissing = "missing from the store"
	diffGhost   = "deleted on the server, still in the store"
	diffUID     = "another object under the same name"
	diffStale   = "at an older or newer resourceVersion"
	diffTwice   = "in two replicas' stores"
)

func kinds(counts map[string]int) string {
	var parts []string
	for _, k := range []string{diffMissing, diffGhost, diffUID, diffStale, diffTwice} {
		if n := counts[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, k))
		}
	}
	return strings.Join(parts, ", ")
}

func sample(items []string) string {
	const show = 5
	if len(items) <= show {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:show], ", ") + fmt.Sprintf(", … (%d more)", len(items)-show)
}

// KilledLag is how long before the killed replica's watch last moved its
// store forward a deletion may have waited in its queue, unhandled at its
// death, without counting as a loss.
const KilledLag = 15 * time.Second

// judge computes verdicts: it compares the controller with the server.
type judge struct {
	list     *rest.Config // straight to an apiserver, no proxy
	ns       string
	replicas []*replica // the one controller, or every replica of a sharded run, the killed one included
	ref      *referee
	deleted  []deletion
	budget   budget
	// sharded: the replicas divide the objects.
	sharded bool
}

func (j *judge) verdict(ctx context.Context) (Verdict, error) {
	c, err := client.New(j.list)
	if err != nil {
		return Verdict{}, err
	}
	list, err := c.List(ctx, j.ns, metav1.ListOptions{})
	if err != nil {
		return Verdict{}, fmt.Errorf("the fresh LIST: %w", err)
	}
	v := Verdict{Listed: len(list.Items), Budget: j.budget}
	var stores []*store.Store[app.Object]
	for _, r := range j.replicas {
		if r.to.IsZero() { // the killed one's store is gone with it
			stores = append(stores, r.app.Store)
		}
	}
	v.StoreDiff, v.DiffKinds = storeDiff(list.Items, stores...)
	for _, o := range list.Items {
		if o.Status.ObservedGeneration != o.Generation || o.Status.Phase != v1alpha1.PhaseProcessed {
			v.StaleStatus = append(v.StaleStatus, fmt.Sprintf("%s generation %d, status %q at %d", store.KeyOf(&o), o.Generation, o.Status.Phase, o.Status.ObservedGeneration))
		}
	}
	for _, d := range j.deleted {
		seen, invisible, owner, fenced, known, endRV := false, false, (*replica)(nil), false, false, int64(-1)
		slot := shard.SlotOf(string(d.UID))
		for _, r := range j.replicas {
			r.rec.mu.Lock()
			seen = seen || r.rec.seenDeleted[d.incarnation]
			known = known || r.rec.known[d.incarnation]
			if !j.sharded {
				owner, invisible = r, r.rec.invisible(d)
			} else if claimed, f, rv := r.rec.owns.claimedAt(slot, d.At); claimed {
				owner, invisible, fenced, endRV = r, r.rec.invisible(d), f, rv
			}
			r.rec.mu.Unlock()
		}
		// Unclaimed: allowed only after a kill or a fence. A slot let go in
		// a handoff is covered by its new owner, which keeps the deletions
		// until it works it: one lost there is a loss.
		why, cause := "", ""
		if j.sharded && !seen && (owner == nil || fenced) {
			why, cause = j.whyUnclaimed(slot, d, owner)
		}
		var killed *replica
		if j.sharded && !seen {
			killed = j.killedHeard(d)
			if r := j.fencedDropped(d); r != nil && owner == nil {
				// It reached a replica (held, or queued), which fenced
				// itself before handling it, and came back without the slot.
				why, cause = fmt.Sprintf("%s heard of it, fenced itself, and dropped it with the slot", r.name), "fenced"
			}
		}
		switch {
		case seen:
		case invisible:
			v.Invisible++
		case killed != nil:
			// It reached the killed replica (a DELETED event, or the gate
			// held or replayed it), which died before handling it.
			v.WithKilled = append(v.WithKilled, fmt.Sprintf("%s (uid %s, deleted %s before %s was killed, which had heard of it)", d.Key, d.UID, killed.to.Sub(d.At).Round(10*time.Millisecond), killed.name))
			v.KilledLagMax = max(v.KilledLagMax, killed.to.Sub(d.At))
		case j.sharded && owner != nil && !fenced && !known && endRV >= 0 && endRV < d.Created:
			v.HandoffGap++
		case j.sharded && (owner == nil || fenced) && (cause == "killed" || cause == "fenced"):
			v.Unclaimed = append(v.Unclaimed, fmt.Sprintf("%s (uid %s; %s)", d.Key, d.UID, why))
			if v.UnclaimedWhy == nil {
				v.UnclaimedWhy = map[string]int{}
			}
			v.UnclaimedWhy[cause]++
		case j.sharded && owner != nil && !owner.to.IsZero() && owner.rec.heardAt().Sub(d.At) <= KilledLag:
			v.WithKilled = append(v.WithKilled, fmt.Sprintf("%s (uid %s, deleted %s before %s was killed)", d.Key, d.UID, owner.to.Sub(d.At).Round(10*time.Millisecond), owner.name))
			v.KilledLagMax = max(v.KilledLagMax, owner.to.Sub(d.At))
		default:
			var saw []string
			for _, r := range j.replicas {
				r.rec.mu.Lock()
				if h := r.rec.history[d.Key]; len(h) > 0 || r == owner {
					saw = append(saw, fmt.Sprintf("%s saw %s", r.name, strings.Join(h, "; ")))
				}
				saw = append(saw, fmt.Sprintf("%s's claims of slot %d: %s", r.name, slot, r.rec.owns.around(slot, d.At)))
				r.rec.mu.Unlock()
			}
			claimant := "no replica: " + why
			if owner != nil {
				claimant = owner.name
			}
			v.UnseenDeletions = append(v.UnseenDeletions, fmt.Sprintf("%s (uid %s, slot %d, claimed by %s; %s)",
				d.Key, d.UID, slot, claimant, strings.Join(saw, "; ")))
		}
	}
	j.ref.mu.Lock()
	v.Overlaps = slices.Clone(j.ref.overlaps)
	v.SameName = j.ref.sameName
	j.ref.mu.Unlock()
	slices.Sort(v.StoreDiff)
	slices.Sort(v.StaleStatus)
	return v, nil
}

// storeDiff compares the store with the server's objects, listed just
// before: a line for each key missing from the store, left over in it, or
// held at another UID or resourceVersion, and the count of each kind. (The
// store's snapshot is taken after the LIST: a controller still at work may
// be ahead of it by then, which is not convergence yet: judge again.)
func storeDiff(server []v1alpha1.MyResource, stores ...*store.Store[app.Object]) ([]string, map[string]int) {
	var lines []string
	kinds := map[string]int{}
	diff := func(kind, line string) {
		kinds[kind]++
		lines = append(lines, line)
	}
	stored := map[string]app.Object{}
	for _, st := range stores { // (sharded: each key in one store)
		for _, o := range st.List() {
			if _, dup := stored[store.KeyOf(o)]; dup {
				diff(diffTwice, store.KeyOf(o)+" in two replicas' stores")
			}
			stored[store.KeyOf(o)] = o
		}
	}
	listed := map[string]bool{}
	for i := range server {
		o := &server[i]
		key := store.KeyOf(o)
		listed[key] = true
		got, ok := stored[key]
		switch {
		case !ok:
			diff(diffMissing, key+" missing from the store")
		case got.UID != o.UID:
			diff(diffUID, fmt.Sprintf("%s is another object in the store (uid %s, server %s)", key, got.UID, o.UID))
		case got.ResourceVersion != o.ResourceVersion:
			diff(diffStale, fmt.Sprintf("%s at resourceVersion %s in the store, %s on the server", key, got.ResourceVersion, o.ResourceVersion))
		}
	}
	for key := range stored {
		if !listed[key] {
			diff(diffGhost, key+" in the store, gone from the server")
		}
	}
	return lines, kinds
}

// Report is the outcome of a run: what happened, and the verdict.
type Report struct {
	Config    Config
	Namespace string
	Verdict   Verdict

	// Durations: until the first list was in the store, until convergence
	// after the faults stopped, the whole run.
	InitialSync, ConvergedIn, Total time.Duration

	// The churn.
	Creates, Recreates, Updates, Deletes, WriteConflicts int64

	// The watcher (watcher.Stats): events applied, lists (the first
	// included), relists, WATCH requests, backoffs, skipped objects, and
	// deletions found by relists (FinalStateUnknown).
	Events, Added, Modified, Deleted, Bookmarks int64
	Lists, Relists, Watches, Backoffs           int64
	Skipped, GoneDeletes                        int64

	// The workers: reconciles, retries after an error, conflicts writing
	// status, successful status writes, deletions handed to the reconciler
	// with an unknown final state; the longest retry delay handed out.
	Reconciles, Retries, Conflicts, StatusWrites, UnknownFinalState int64
	LongestRetry                                                    time.Duration

	// The faults: the proxy's counts, etcd compactions, apiserver restarts,
	// streams the watchdog abandoned, and the persistent faults' phases.
	Proxy       faultproxy.Counts
	Compactions int
	Restarts    int
	RestartTook time.Duration
	RestartErr  error
	Silent      int
	Phases      []PhaseReport
	// Sharded runs: the replica killed and the one started in its place,
	// with when (since the faults began).
	Killed, Started []string

	mu sync.Mutex
}

// PhaseReport is what happened during one persistent fault: From and To
// since the faults began, the watcher's requests, the streams the proxy cut
// and ended with a 500, and the streams the watchdog abandoned.
type PhaseReport struct {
	Name, What       string
	From, To         time.Duration
	Requests         faultproxy.Rate
	Cut, ErrorEvents int64
	Silent           int
}

// Failures is the verdict's list of losses; empty means PASS.
func (r *Report) Failures() []string {
	f := r.Verdict.Failures()
	if r.slow() {
		f = append(f, fmt.Sprintf("converged %v after the faults stopped, bound %v", r.ConvergedIn.Round(100*time.Millisecond), r.Config.MaxConvergence))
	}
	return f
}

// slow: the controller took longer than MaxConvergence to converge.
func (r *Report) slow() bool {
	return r.Config.MaxConvergence > 0 && r.ConvergedIn > r.Config.MaxConvergence
}

// fill sums up what the replicas did (the one controller, or all of a
// sharded run).
func (r *Report) fill(replicas []*replica, proxy faultproxy.Counts, ch *churner) {
	for _, rp := range replicas {
		st := rp.app.Watcher.Stats()
		r.Events, r.Added, r.Modified, r.Deleted, r.Bookmarks = r.Events+st.Events, r.Added+st.Added, r.Modified+st.Modified, r.Deleted+st.Deleted, r.Bookmarks+st.Bookmarks
		r.Lists, r.Relists, r.Watches, r.Backoffs = r.Lists+st.Lists, r.Relists+st.Relists, r.Watches+st.Watches, r.Backoffs+st.Backoffs
		r.Skipped, r.GoneDeletes = r.Skipped+st.Skipped, r.GoneDeletes+st.GoneDeletes
		rec := rp.rec
		rec.mu.Lock()
		r.Reconciles, r.Retries, r.Conflicts = r.Reconciles+rec.reconciles, r.Retries+rec.retries, r.Conflicts+rec.conflicts
		r.StatusWrites, r.UnknownFinalState = r.StatusWrites+rec.writes, r.UnknownFinalState+rec.unknown
		r.LongestRetry = max(r.LongestRetry, rec.longestRetry)
		rec.mu.Unlock()
		r.Silent += rec.silentBetween(time.Time{}, time.Now())
	}
	r.Creates, r.Recreates, r.Updates, r.Deletes, r.WriteConflicts = ch.creates.Load(), ch.recreates.Load(), ch.updates.Load(), ch.deletes.Load(), ch.conflicts.Load()
	for _, err := range ch.errors() {
		r.Verdict.ChurnErrors = append(r.Verdict.ChurnErrors, err.Error())
	}
	r.Proxy = proxy
	slices.SortFunc(r.Phases, func(a, b PhaseReport) int { return cmp.Compare(a.From, b.From) })
}

// Print writes the report as a learner would want to read it.
func (r *Report) Print(w io.Writer) {
	c := r.Config
	fmt.Fprintf(w, "chaos run: %d objects churned at %.0f changes/s for %v; %d workers\n",
		c.Objects, c.ChurnRate, c.Duration, c.Workers)
	fmt.Fprintf(w, "faults: watch cut %s, 410 ERROR event %s, etcd compaction (the controller cut off for 1s) %s, apiserver restarts %d",
		every(c.CutEvery), every(c.ExpireEvery), every(c.CompactEvery), r.Restarts)
	if r.Restarts > 0 {
		fmt.Fprintf(w, " (back in %v)", r.RestartTook.Round(100*time.Millisecond))
	}
	for _, p := range r.Phases {
		fmt.Fprintf(w, "; %s %v–%v", p.Name, p.From.Round(time.Second), p.To.Round(time.Second))
	}
	wo := c.Watch()
	if c.Compress > 1 {
		fmt.Fprintf(w, "\nwatcher: backoff and watchdog compressed ×%d (%v doubling to %v, reset after %v calm; silence limit %v), so that %v sees what %v would",
			c.Compress, wo.Backoff.Initial, wo.Backoff.Max, wo.Backoff.ResetAfter, wo.SilenceLimit, c.Duration, c.Duration*time.Duration(c.Compress))
	} else {
		fmt.Fprintf(w, "\nwatcher: its real backoff (%v doubling to %v, reset after %v calm) and watchdog (silence limit %v)",
			wo.Backoff.Initial, wo.Backoff.Max, wo.Backoff.ResetAfter, wo.SilenceLimit)
	}
	if c.Replicas > 1 {
		fmt.Fprintf(w, "\nreplicas: %d with --sharding (ring lease %v, renew period %v); killed %s; started %s",
			c.Replicas, cmp.Or(c.RingLease, ring.DefaultLeaseDuration), cmp.Or(c.RingRenew, ring.DefaultRenewPeriod),
			strings.Join(r.Killed, ", "), strings.Join(r.Started, ", "))
	}
	fmt.Fprintf(w, "\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(what string, n any, note string) { fmt.Fprintf(tw, "  %s\t%v\t%s\n", what, n, note) }
	fmt.Fprintln(tw, "churn")
	row("creates", r.Creates, fmt.Sprintf("%d of them re-created a deleted name (a new UID)", r.Recreates))
	row("updates", r.Updates, fmt.Sprintf("each a new generation; %d conflicts with the controller's status writes, retried", r.WriteConflicts))
	row("deletes", r.Deletes, "")
	fmt.Fprintln(tw, "faults")
	row("watch streams cut", r.Proxy.Cut, "")
	row("410s injected", r.Proxy.Expired, "ERROR event, then end of stream")
	row("410s from the server", r.Proxy.UpstreamGone, "history compacted by etcd")
	row("500s injected", r.Proxy.ErrorEvents, "ERROR event after a stream's first event, then end of stream")
	row("etcd compactions", r.Compactions, fmt.Sprintf("each while the proxy refused connections for 1s (%d refusals)", r.Proxy.Refused))
	row("apiserver restarts", r.Restarts, "")
	row("silent streams", r.Silent, "abandoned by the watchdog")
	if len(r.Phases) > 0 {
		fmt.Fprintln(tw, "persistent faults\tLIST+WATCH\t")
	}
	for _, p := range r.Phases {
		note := fmt.Sprintf("%s, %v–%v", p.What, p.From.Round(time.Second), p.To.Round(time.Second))
		switch p.Name {
		case "flap-cut":
			note += fmt.Sprintf(": %d streams cut", p.Cut)
		case "flap-error":
			note += fmt.Sprintf(": %d streams ended by a 500", p.ErrorEvents)
		case "freeze":
			note += fmt.Sprintf(": %d streams abandoned by the watchdog", p.Silent)
		}
		row(p.Name, fmt.Sprintf("%d+%d", p.Requests.Lists, p.Requests.Watches), note)
	}
	fmt.Fprintln(tw, "watcher")
	row("events", r.Events, fmt.Sprintf("%d added, %d modified, %d deleted", r.Added, r.Modified, r.Deleted))
	row("bookmarks", r.Bookmarks, "")
	row("lists", r.Lists, fmt.Sprintf("%d relists; %d deletions found by relists (FinalStateUnknown)", r.Relists, r.GoneDeletes))
	row("watch requests", r.Watches, fmt.Sprintf("%d restarts of the watch", max(r.Watches-1, 0)))
	row("backoffs", r.Backoffs, "")
	row("skipped objects", r.Skipped, "")
	fmt.Fprintln(tw, "workers")
	row("reconciles", r.Reconciles, fmt.Sprintf("%d status writes", r.StatusWrites))
	row("retries", r.Retries, fmt.Sprintf("%d after a conflict; the longest delay before a retry %v", r.Conflicts, r.LongestRetry.Round(time.Millisecond)))
	row("deletions seen", r.Deletes-int64(len(r.Verdict.UnseenDeletions)+r.Verdict.Invisible+len(r.Verdict.Unclaimed)+r.Verdict.HandoffGap+len(r.Verdict.WithKilled)), fmt.Sprintf("%d with an unknown final state (found by a relist)", r.UnknownFinalState))
	fmt.Fprintln(tw, "time")
	row("first list synced", r.InitialSync.Round(100*time.Millisecond), "after start (includes creating the objects)")
	row("converged", r.ConvergedIn.Round(100*time.Millisecond), "after the faults stopped")
	row("whole run", r.Total.Round(time.Second), "")
	tw.Flush()

	v := r.Verdict
	fmt.Fprintf(w, "\nchecks\n")
	check := func(ok bool, what string) {
		mark := "ok  "
		if !ok {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  %s %s\n", mark, what)
	}
	check(len(v.StoreDiff) == 0, fmt.Sprintf("the store equals a fresh LIST of %d objects", v.Listed))
	check(len(v.StaleStatus) == 0, "every object's status.observedGeneration equals its metadata.generation")
	if r.Config.Replicas > 1 {
		check(len(v.UnseenDeletions) == 0, fmt.Sprintf("all %d deletions reached the reconciler, but %d inside a relist gap and %d inside a handoff's gap (objects created after the old owner's watch position when it let the slot go, deleted before the new owner listed it), which no replica could see; %d of objects whose slot no replica claimed when they were deleted, or whose claimant fenced itself (%s; %s); and %d the killed replica had not handled when it died, at most %v before (%s)",
			r.Deletes-int64(v.Invisible+v.HandoffGap)-int64(len(v.Unclaimed)+len(v.WithKilled)), v.Invisible, v.HandoffGap, len(v.Unclaimed), causes(v.UnclaimedWhy), sample(v.Unclaimed),
			len(v.WithKilled), v.KilledLagMax.Round(10*time.Millisecond), sample(v.WithKilled)))
	} else {
		check(len(v.UnseenDeletions) == 0, fmt.Sprintf("all %d deletions reached the reconciler (but %d of objects that lived and died inside a relist gap, which no client could see)",
			r.Deletes-int64(v.Invisible), v.Invisible))
	}
	if r.Config.Replicas > 1 {
		check(len(v.Overlaps) == 0, fmt.Sprintf("no object was reconciled by two workers or two replicas at once (but %d times a re-created name's old and new objects, in two shards, were handled at once)", v.SameName))
	} else {
		check(len(v.Overlaps) == 0, "no key was reconciled by two workers at once")
	}
	check(len(v.ChurnErrors) == 0, "every churn write succeeded")
	if r.Config.MaxConvergence > 0 {
		check(!r.slow(), fmt.Sprintf("converged %v after the faults stopped, bound %v", r.ConvergedIn.Round(100*time.Millisecond), r.Config.MaxConvergence))
	}
	b := v.Budget
	check(b.Busiest <= b.Bound, fmt.Sprintf("request budget: the watcher's busiest minute of faults held %d LISTs and WATCHes, its bound %d (%.1f a minute over the %v of faults: %d LISTs, %d WATCHes)",
		b.Busiest, b.Bound, b.Requests.PerMinute(b.Requests.Requests()), b.Requests.Over.Round(time.Second), b.Requests.Lists, b.Requests.Watches))
	if f := r.Failures(); len(f) > 0 {
		fmt.Fprintf(w, "\nVERDICT: FAIL\n")
		for _, line := range f {
			fmt.Fprintf(w, "  %s\n", line)
		}
		return
	}
	if n := len(v.Unclaimed) + len(v.WithKilled); r.Config.Replicas > 1 && n > 0 {
		fmt.Fprintf(w, "\nVERDICT: PASS — but %d deletions were not replayed: made while their slot had no owner (after a kill or a fence), or whose owner fenced itself or was killed (see above)\n", n)
		return
	}
	fmt.Fprintf(w, "\nVERDICT: PASS — nothing lost\n")
}

func every(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return "every ~" + d.String()
}

// whyUnclaimed says why a deletion had no replica to see it: its claimant
// fenced itself, or the slot's last claimant was killed, fenced itself or
// let it go (and when).
func (j *judge) whyUnclaimed(slot int, d deletion, fenced *replica) (why, cause string) {
	if fenced != nil {
		return fenced.name + " claimed the slot, then fenced itself", "fenced"
	}
	var last *replica
	var ended time.Time
	var byFence bool
	for _, r := range j.replicas {
		r.rec.mu.Lock()
		t, f := r.rec.owns.endedBefore(slot, d.At)
		r.rec.mu.Unlock()
		if !t.IsZero() && t.After(ended) {
			last, ended, byFence = r, t, f
		}
		if !r.to.IsZero() && r.to.Before(d.At) && (last == nil || r.to.After(ended)) {
			r.rec.mu.Lock()
			claimed, _, _ := r.rec.owns.claimedAt(slot, r.to)
			r.rec.mu.Unlock()
			if claimed {
				last, ended, byFence = r, r.to, false
			}
		}
	}
	switch {
	case last == nil:
		return "never claimed yet", "never"
	case !last.to.IsZero() && !ended.Before(last.to.Add(-time.Second)): // its stop dropped the claims
		return fmt.Sprintf("%s, its owner, was killed %s before", last.name, d.At.Sub(ended).Round(100*time.Millisecond)), "killed"
	case byFence:
		return fmt.Sprintf("%s, its owner, fenced itself %s before", last.name, d.At.Sub(ended).Round(100*time.Millisecond)), "fenced"
	default:
		return fmt.Sprintf("%s let it go %s before", last.name, d.At.Sub(ended).Round(100*time.Millisecond)), "let go"
	}
}

// causes is "12 after a kill, 3 after a fence, …".
func causes(m map[string]int) string {
	var out []string
	for _, c := range []struct{ key, text string }{{"killed", "after a kill"}, {"fenced", "after a fence"}, {"let go", "let go, not yet claimed again"}, {"never", "never claimed yet"}} {
		if m[c.key] > 0 {
			out = append(out, fmt.Sprintf("%d %s", m[c.key], c.text))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// killedHeard is the killed replica, if the deletion reached it.
// fencedDropped is the replica that heard of deletion d, fenced itself
// after d was made, then dropped d with its slot (it came back without
// it), if one did.
func (j *judge) fencedDropped(d deletion) *replica {
	for _, r := range j.replicas {
		r.rec.mu.Lock()
		at, dropped := r.rec.dropped[d.incarnation]
		fenced := dropped && r.rec.owns.fencedBetween(d.At, at)
		r.rec.mu.Unlock()
		if fenced {
			return r
		}
	}
	return nil
}

func (j *judge) killedHeard(d deletion) *replica {
	for _, r := range j.replicas {
		if r.to.IsZero() {
			continue
		}
		r.rec.mu.Lock()
		heard := r.rec.heardDeleted[d.incarnation]
		r.rec.mu.Unlock()
		if heard {
			return r
		}
	}
	return nil
}
