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
	"rawwatch/app"
	"rawwatch/client"
	"rawwatch/faultproxy"
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
	// The deletions the reconciler never saw that no replica could have
	// handled, each by one rule of judgeDeletion (each with its bound, and
	// a test that fails the verdict without the rule's condition). Counted,
	// not failed; any other unseen deletion is in UnseenDeletions.
	//
	// Invisible (relist gap): of objects no replica had while it claimed
	// their slot (recorder.custody), or was given their slot having them
	// (judge.givenToAHolder), created inside a gap of the watch of the
	// slot's claimant (between a broken watch and the relist that
	// followed), and so deleted before that relist, which did not have
	// them.
	Invisible int
	// Unclaimed (sharded runs): of objects whose slot no replica claimed
	// when they were deleted, within Bound of the kill or fence that ended
	// the last claim; or deleted within Bound before their claimant (or,
	// the ring forming, their first claimant after) fenced itself; or
	// heard of by a replica that fenced itself within Bound and
	// then dropped them with their slot. UnclaimedWhy counts them by cause,
	// "killed" or "fenced".
	Unclaimed    []string
	UnclaimedWhy map[string]int
	// WithKilled (sharded runs): deletions the killed replica died with:
	// deleted within Bound before the kill, while it claimed the slot (and
	// it still did at the kill), or claimed first after it while nobody
	// had (the ring forming), or heard of by it, and held, not dropped,
	// while no live replica claimed the slot; and no replica that heard of
	// it kept it (or had the object, its watch on the slot since) and
	// worked the slot after (see diedWith). KilledLagMax is the longest
	// time such a deletion came before the kill.
	WithKilled   []string
	KilledLagMax time.Duration
	// Bound is the time bound of the kill's and the fence's rules (see
	// judge.bound); Longest, per rule, the longest stretch it excused.
	Bound   time.Duration
	Longest map[string]time.Duration
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
	// Sharded runs: the requests on Leases of the replica that made the
	// most in a minute (LeaseReplica), by verb, while the faults lasted;
	// that most, and the bound its ring promises (leaseBound).
	Leases                   map[string]int
	LeaseReplica             string
	LeaseBusiest, LeaseBound int
}

// leases measures the ring's share of the budget: the replica that made the
// most requests on Leases in a minute from from to to, and the bound of a
// ring renewing every renew.
func (b *budget) leases(replicas []*replica, from, to time.Time, renew time.Duration) {
	b.LeaseBound, b.LeaseBusiest = leaseBound(renew), -1
	for _, r := range replicas {
		if n := r.leases.busiest(from, to); n > b.LeaseBusiest {
			b.Leases, b.LeaseBusiest, b.LeaseReplica = r.leases.between(from, to), n, r.name
		}
	}
}

// requestBound is the most LISTs and WATCHes a watcher with backoff b may
// make in any minute under faults: package watcher's bound, 40 with its
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
	if b := v.Budget; b.LeaseBusiest > b.LeaseBound {
		out = append(out, fmt.Sprintf("over the Lease budget: %s made %d requests on Leases in one minute (%s), bound %d", b.LeaseReplica, b.LeaseBusiest, verbs(b.Leases), b.LeaseBound))
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
	// lease is the ring's lease duration; outage, how long the API server's
	// restart took (nobody could claim, or handle, anything meanwhile).
	lease, outage time.Duration
}

// bound is the time bound of the rules that excuse a deletion lost to a
// kill or a fence: four lease durations (the ring's HandoffTimeout), plus
// the API server's restart. Why nothing within it could have been handled,
// and why everything older could:
//
//   - Unclaimed after a kill or a fence. The member's Lease expires a lease
//     duration after its last renewal; the others see it within a renew
//     period, list its slots, claim them (a write, then a read: two renew
//     periods) — a lease duration and four renew periods, at most 2⅓ lease
//     durations since a renew period is at most a third of one, and a list;
//     and while the API server restarts nobody renews, lists or claims. A
//     slot unclaimed longer than that is a stall of the ring, and its
//     deletions are losses.
//   - Deleted before its claimant was killed or fenced itself, unhandled.
//     A deletion reaches its claimant within its watch's lag (a backoff
//     cap and a relist, under the faults), then waits in its queue; a slot
//     being let go waits for its deletions no longer than HandoffTimeout
//     either. One made longer than that before the kill or the fence
//     should have been handled by then: its loss is not the kill's.
func (j *judge) bound() time.Duration {
	return 4*cmp.Or(j.lease, ring.DefaultLeaseDuration) + j.outage
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
		j.judgeDeletion(&v, d)
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

	// The watcher (package stats): events applied, lists (the first
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
	// with when (since the faults began); the writes by others to the
	// ring's Leases (hands): labels, and the one-off ones.
	Killed, Started []string
	HandLabels      int
	Hands           []string

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
		st := rp.app.Stats.Counts()
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
		fmt.Fprintf(w, "\nreplicas: %d with --sharding (ring lease %v, renew period %v); killed %s; started %s (lease %v, renew period %v)",
			c.Replicas, cmp.Or(c.RingLease, ring.DefaultLeaseDuration), cmp.Or(c.RingRenew, ring.DefaultRenewPeriod),
			strings.Join(r.Killed, ", "), strings.Join(r.Started, ", "), rejoinLease(c), rejoinRenew(c))
		fmt.Fprintf(w, "\nhands on the ring's Leases: %d labels; %s", r.HandLabels, strings.Join(r.Hands, ", "))
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
	row("etcd compactions", r.Compactions, fmt.Sprintf("each with the streams cut and connections refused for 1s (%d refusals)", r.Proxy.Refused))
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
	row("deletions seen", r.Deletes-int64(len(r.Verdict.UnseenDeletions)+r.Verdict.Invisible+len(r.Verdict.Unclaimed)+len(r.Verdict.WithKilled)), fmt.Sprintf("%d with an unknown final state (found by a relist)", r.UnknownFinalState))
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
		check(len(v.UnseenDeletions) == 0, fmt.Sprintf("all %d deletions reached the reconciler, but %d inside a relist gap, which no replica could see; %d of objects whose slot no replica claimed when they were deleted, after a kill or a fence, or whose claimant (or a replica that held them) fenced itself (%s; %s); and %d the killed replica died with, at most %v before (%s)",
			r.Deletes-int64(v.Invisible)-int64(len(v.Unclaimed)+len(v.WithKilled)), v.Invisible, len(v.Unclaimed), causes(v.UnclaimedWhy), sample(v.Unclaimed),
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
	if r.Config.Replicas > 1 {
		check(b.LeaseBusiest <= b.LeaseBound, fmt.Sprintf("Lease budget: the ring's busiest minute of faults held %d requests on Leases (%s, %s over the faults: %s), its bound %d",
			b.LeaseBusiest, b.LeaseReplica, b.LeaseReplica, verbs(b.Leases), b.LeaseBound))
		var longest []string
		for _, rule := range []string{"killed", "unclaimed after a kill", "unclaimed after a fence"} {
			if d, ok := v.Longest[rule]; ok {
				longest = append(longest, fmt.Sprintf("%s %v", rule, d.Round(100*time.Millisecond)))
			}
		}
		if len(longest) > 0 {
			fmt.Fprintf(w, "  the rules of the kill and the fence, bound %v (4 lease durations and the API server's restart), excused at most: %s\n",
				v.Bound.Round(100*time.Millisecond), strings.Join(longest, ", "))
		}
	}
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

// verbs is "get 60, list 60, update 59".
func verbs(n map[string]int) string {
	var out []string
	for _, v := range []string{"get", "list", "create", "update", "patch", "delete"} {
		if n[v] > 0 {
			out = append(out, fmt.Sprintf("%s %d", v, n[v]))
		}
	}
	return strings.Join(out, ", ")
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

// facts is what the replicas' records say about one deletion.
type facts struct {
	slot int
	// seen: a replica handled it; known: a replica ever had the object;
	// kept: a replica had it while it claimed its slot (recorder.custody).
	seen, known, kept bool
	// owner claimed the slot (Working or Releasing) when it was deleted
	// (nil: nobody did); claim is how that claim ended. Two claims overlap
	// only around a handoff (the old owner's Releasing, the new one's
	// Working): the verdict keeps the claim that lasted longest after the
	// deletion (ties: the first name), whatever the order of the replicas.
	// That claimant had the most time to handle it, and its end (a fence,
	// a kill) is the narrowest excuse.
	owner *replica
	claim claim
}

func (j *judge) facts(d deletion) facts {
	f := facts{slot: shard.SlotOf(string(d.UID)), claim: claim{rv: -1}}
	for _, r := range j.replicas {
		r.rec.mu.Lock()
		// A kill is a kill: what a killed replica's stop handled after it
		// (its drain) a SIGKILL would not have.
		if at, ok := r.rec.seenDeleted[d.incarnation]; ok && (r.to.IsZero() || !at.After(r.to)) {
			f.seen = true
		}
		_, had := r.rec.known[d.incarnation]
		f.known = f.known || had
		f.kept = f.kept || r.rec.custody(d, f.slot, r.to)
		if !j.sharded {
			f.owner = r
		} else if claimed, c := r.rec.owns.claimedAt(f.slot, d.At); claimed && (r.to.IsZero() || !d.At.After(r.to)) {
			if !r.to.IsZero() && (c.end.IsZero() || c.end.After(r.to)) {
				c = claim{end: r.to, rv: r.rec.lastRV} // its claims ended with it
			}
			if f.owner == nil || laterEnd(c, f.claim) || (sameEnd(c, f.claim) && r.name < f.owner.name) {
				f.owner, f.claim = r, c
			}
		}
		r.rec.mu.Unlock()
	}
	return f
}

// laterEnd: claim a ended after claim b (a zero end: it never did).
func laterEnd(a, b claim) bool {
	return !b.end.IsZero() && (a.end.IsZero() || a.end.After(b.end))
}

func sameEnd(a, b claim) bool { return a.end.Equal(b.end) }

// judgeDeletion puts deletion d in v: seen, excused by one of the rules
// below (tried in this order), or lost. Each rule names what kept every
// replica from handling it, and is bounded: in resourceVersions (the gaps),
// or in time (judge.bound).
func (j *judge) judgeDeletion(v *Verdict, d deletion) {
	f := j.facts(d)
	if f.seen {
		return
	}
	longest := func(rule string, d time.Duration) {
		if v.Longest == nil {
			v.Longest = map[string]time.Duration{}
		}
		v.Longest[rule] = max(v.Longest[rule], d)
	}
	v.Bound = j.bound()
	// A relist gap: no replica had the object while it claimed its slot,
	// and it lived and died inside a gap of its claimant's watch; or, while
	// nobody claimed its slot, of every watch of the slot. (A replica that
	// had it while it claimed the slot would have heard of its deletion, or
	// handed it over: a loss then. One that only watched the slot, about
	// to claim it or not, and let it go owed it to nobody: with one
	// controller, that object would not have been seen either.)
	//
	// Nor when the claim was let go to a replica that had it: the ring
	// gives a slot let go to a member that covers it, which keeps its
	// deletions and claims it whatever its target (custody), so if every
	// replica that watched the slot at the let-go had the object or held
	// its deletion, one of them owed it (givenToAHolder). (Deleted between
	// a let-go and the next claim: the claim let go, at most the bound
	// before.)
	g := f
	if g.owner == nil {
		if last, c := j.lastClaim(f.slot, d.At); last != nil && !killedWith(last, c) && d.At.Sub(c.end) <= j.bound() {
			g.owner, g.claim = last, c
		}
	}
	kept := f.kept || j.givenToAHolder(d, f.slot, g.owner, g.claim)
	if !kept && (f.owner != nil && j.inGap(f.owner, d) || f.owner == nil && j.inEveryWatchersGap(d, f.slot)) {
		v.Invisible++
		return
	}
	if !j.sharded {
		j.lost(v, d, f, "")
		return
	}
	// The killed replica died with it.
	if k, lag := j.diedWith(d, f); k != nil {
		v.WithKilled = append(v.WithKilled, fmt.Sprintf("%s (uid %s, deleted %s before %s was killed)", d.Key, d.UID, lag.Round(10*time.Millisecond), k.name))
		v.KilledLagMax = max(v.KilledLagMax, lag)
		longest("killed", lag)
		return
	}
	// Nobody claimed the slot, after a kill or a fence; or its claimant, or
	// a replica that held it, fenced itself before handling it.
	if why, cause, stretch := j.unclaimed(d, f); cause != "" {
		v.Unclaimed = append(v.Unclaimed, fmt.Sprintf("%s (uid %s; %s)", d.Key, d.UID, why))
		if v.UnclaimedWhy == nil {
			v.UnclaimedWhy = map[string]int{}
		}
		v.UnclaimedWhy[cause]++
		longest("unclaimed after a "+map[string]string{"killed": "kill", "fenced": "fence"}[cause], stretch)
		return
	}
	why, _, _ := j.lastClaimant(f.slot, d.At)
	j.lost(v, d, f, why)
}

// givenToAHolder: owner's claim c of slot ended by a let-go (not a fence
// or a kill), and every other replica alive that watched the slot then, at
// least one, had d's object or held its deletion then or after
// (recorder.heldAfter). The ring lets a slot go only once the member it
// goes to covers it (watches it), and names that member until it claims
// the slot; that member keeps the slot's deletions and claims it whatever
// its target (ring: Custody). So the slot went to a replica that had the
// object, and a drop of its deletion was a loss (docs/sharding.md: "one
// lost when the new owner's target moved on before it claimed the slot").
// One that watched the slot without ever having the object (its own gap,
// or a list after the deletion) may have been the one: then nothing is
// said. Nor when the old owner or a replica watching the slot was killed
// or fenced itself within the bound after the let-go: the slot may have
// gone to one that died before it claimed it, or whose custody a fence
// (its own, or the old owner's: its Lease names nobody then) ended; the
// rules of the kill and the fence judge those. (A handoff overdue, let go
// after HandoffTimeout to a member that never covered the slot, cannot be
// told apart here: the ring then says what may be lost, and the verdict
// counts it lost.)
func (j *judge) givenToAHolder(d deletion, slot int, owner *replica, c claim) bool {
	if owner == nil || c.end.IsZero() || c.fenced || killedWith(owner, c) || j.killedOrFenced(owner, c.end) {
		return false
	}
	holders := 0
	for _, r := range j.replicas {
		if r == owner || r.from.After(c.end) || !r.to.IsZero() && r.to.Before(c.end) {
			continue
		}
		r.rec.mu.Lock()
		watched := r.rec.watchedAt(slot, c.end)
		held := watched && r.rec.heldAfter(d, slot, r.to, c.end)
		r.rec.mu.Unlock()
		if !watched {
			continue
		}
		if !held || j.killedOrFenced(r, c.end) {
			return false
		}
		holders++
	}
	return holders > 0
}

// killedOrFenced: r was killed, or fenced itself, within the bound after t.
func (j *judge) killedOrFenced(r *replica, t time.Time) bool {
	until := t.Add(j.bound())
	if !r.to.IsZero() && !r.to.Before(t) && !r.to.After(until) {
		return true
	}
	r.rec.mu.Lock()
	defer r.rec.mu.Unlock()
	return !r.rec.owns.fencedBetween(t, until).IsZero()
}

// inGap: r never had the object of d, created inside a gap of r's watch
// (after its last position, and at or before the relist that ended the
// gap; the relist did not have it, so it was deleted before).
func (j *judge) inGap(r *replica, d deletion) bool {
	r.rec.mu.Lock()
	defer r.rec.mu.Unlock()
	return r.rec.invisible(d)
}

// inEveryWatchersGap: some replica watched slot when d was made (watchedAt:
// its last list or reshard before had the slot), and every one that did,
// alive then, never had the object, created inside a gap of its watch. Nobody watching the slot
// is no excuse here (the rules of the kill and the fence judge that).
func (j *judge) inEveryWatchersGap(d deletion, slot int) bool {
	watchers := 0
	for _, r := range j.replicas {
		if r.from.After(d.At) || !r.to.IsZero() && r.to.Before(d.At) {
			continue
		}
		r.rec.mu.Lock()
		watched := r.rec.watchedAt(slot, d.At)
		invisible := r.rec.invisible(d)
		r.rec.mu.Unlock()
		if !watched {
			continue
		}
		if !invisible {
			return false
		}
		watchers++
	}
	return watchers > 0
}

// diedWith is the killed replica, if it died with deletion d unhandled:
// deleted within the bound before the kill, and either it claimed the slot
// then and still did at the kill; or nobody claimed the slot then (the
// ring still forming), it was the first to claim it after the deletion and
// held it to the kill, nobody else claiming it, it had not dropped the
// deletion (heard or not: its watch may have broken before it), and alive
// it would have handled it (it had the object or heard of it, or nobody had
// it, and its watch followed the slot from the deletion to its claim); or
// it heard of the deletion and held it,
// not dropped, while no live replica claimed the slot (nobody did, or the
// claimant had let it go before the kill, and no other replica claimed it
// from then to the kill). In every case no replica that heard of it kept
// it (or had the object, its watch on the slot since) and worked the slot
// after (keptAndWorkedAgain). lag is how long before
// the kill d was made.
func (j *judge) diedWith(d deletion, f facts) (k *replica, lag time.Duration) {
	for _, r := range j.replicas {
		if r.to.IsZero() || d.At.After(r.to) || r.to.Sub(d.At) > j.bound() {
			continue
		}
		r.rec.mu.Lock()
		heard := r.rec.heardDeleted[d.incarnation]
		_, dropped := r.rec.dropped[d.incarnation]
		r.rec.mu.Unlock()
		// Its stop drops its claims: a claim that ended within a second of
		// the kill lasted until it.
		lastedToTheKill := func(c claim) bool { return c.end.IsZero() || !c.end.Before(r.to.Add(-time.Second)) }
		claimedToTheEnd := f.owner == r && lastedToTheKill(f.claim)
		if f.owner == nil && !dropped && !claimedToTheEnd {
			// The first claimant after the deletion, to its death; and,
			// alive, it would have handled it: it had the object (its
			// relist would report it gone) or heard of it, or nobody had
			// it, and its watch followed the slot from the deletion to its
			// claim (a reshard away drops the object without a deletion).
			from, c, could := j.firstClaim(r, d, f)
			claimedToTheEnd = could && from.Before(r.to) && lastedToTheKill(c) && !j.othersClaimed(r, f.slot, d.At, r.to)
		}
		// handedOn: nobody claimed the slot at the deletion, or its claimant
		// let it go before the kill; and no other replica claimed it from
		// then to the kill (the claimant let it go to k, or to nobody).
		handedOn := f.owner == nil || (f.owner != r && !f.claim.end.IsZero() && f.claim.end.Before(r.to))
		if handedOn {
			from := d.At
			if f.owner != nil {
				from = f.claim.end
			}
			handedOn = !j.othersClaimed(r, f.slot, from, r.to)
		}
		if claimedToTheEnd || (heard && !dropped && handedOn) {
			// Unless a replica that heard of it kept it and worked the
			// slot after (it held the deletion to handle then).
			if j.keptAndWorkedAgain(d, f.slot, d.At) != nil {
				return nil, 0
			}
			return r, r.to.Sub(d.At)
		}
	}
	return nil, 0
}

// firstClaim is r's first claim of d's slot after d (from: when it began;
// zero, none) and how it ended; could says whether r, had nothing stopped
// it, would have handled d by it: it had the object (its relist would
// report it gone) or heard of it, or nobody had it, and its watch followed
// the slot from the deletion to that claim (a reshard away drops the
// object without a deletion).
func (j *judge) firstClaim(r *replica, d deletion, f facts) (from time.Time, c claim, could bool) {
	r.rec.mu.Lock()
	defer r.rec.mu.Unlock()
	if from = r.rec.owns.claimedFrom(f.slot, d.At); from.IsZero() {
		return from, c, false
	}
	_, c = r.rec.owns.claimedAt(f.slot, from)
	_, had := r.rec.known[d.incarnation]
	return from, c, (r.rec.heardDeleted[d.incarnation] || had || !f.known) && r.rec.watchedThrough(f.slot, d.At, from)
}

// othersClaimed: a replica other than k claimed slot after from, up to to
// (a killed one, before its kill).
func (j *judge) othersClaimed(k *replica, slot int, from, to time.Time) bool {
	for _, r := range j.replicas {
		if r == k {
			continue
		}
		r.rec.mu.Lock()
		at := r.rec.owns.claimedFrom(slot, from)
		r.rec.mu.Unlock()
		if !at.IsZero() && !at.After(to) && (r.to.IsZero() || at.Before(r.to)) {
			return true
		}
	}
	return false
}

// unclaimed says why nobody could handle deletion d after a kill or a
// fence (cause "" if that is not why): its slot had no claimant within the
// bound after the kill or fence that ended the last claim; or its claimant
// fenced itself within the bound after it; or a replica heard of it, fenced
// itself within the bound after it, and dropped it with its slot while
// nobody claimed it. stretch is the time measured against the bound.
func (j *judge) unclaimed(d deletion, f facts) (why, cause string, stretch time.Duration) {
	switch {
	case f.owner != nil && f.claim.fenced:
		if stretch = f.claim.end.Sub(d.At); stretch <= j.bound() && j.keptAndWorkedAgain(d, f.slot, f.claim.end) == nil {
			return fmt.Sprintf("%s claimed the slot, and fenced itself %s later", f.owner.name, stretch.Round(100*time.Millisecond)), "fenced", stretch
		}
	case f.owner == nil:
		why, cause, ended := j.lastClaimant(f.slot, d.At)
		if stretch = d.At.Sub(ended); (cause == "killed" || cause == "fenced") && stretch <= j.bound() &&
			(cause == "killed" || j.keptAndWorkedAgain(d, f.slot, ended) == nil) {
			return why, cause, stretch
		}
		// The ring forming (nobody claimed the slot yet, or not since a
		// let-go): its first claimant after the deletion, which would have
		// handled it, fenced itself before it could, within the bound after
		// the deletion, and nobody else claimed the slot before that fence
		// (an API server's restart fences every replica of a ring still
		// forming).
		for _, r := range j.replicas {
			from, c, could := j.firstClaim(r, d, f)
			if !could || !c.fenced || (!r.to.IsZero() && !c.end.Before(r.to)) || j.othersClaimed(r, f.slot, d.At, c.end) {
				continue
			}
			if stretch = c.end.Sub(d.At); stretch <= j.bound() && j.keptAndWorkedAgain(d, f.slot, c.end) == nil {
				return fmt.Sprintf("%s claimed the slot first after it, %s later, and fenced itself %s after it", r.name,
					from.Sub(d.At).Round(100*time.Millisecond), stretch.Round(100*time.Millisecond)), "fenced", stretch
			}
		}
		for _, r := range j.replicas {
			r.rec.mu.Lock()
			at, dropped := r.rec.dropped[d.incarnation]
			fence := time.Time{}
			if dropped {
				fence = r.rec.owns.fencedBetween(d.At, at)
			}
			r.rec.mu.Unlock()
			if stretch = fence.Sub(d.At); !fence.IsZero() && stretch <= j.bound() && j.keptAndWorkedAgain(d, f.slot, fence) == nil {
				return fmt.Sprintf("%s heard of it, fenced itself %s later, and dropped it with the slot", r.name, stretch.Round(100*time.Millisecond)), "fenced", stretch
			}
		}
	}
	return "", "", 0
}

// keptAndWorkedAgain is a replica that heard of deletion d, kept it (did
// not drop it), and claimed its slot again after fence (and before its
// kill, if killed): a fence keeps the deletions heard of, held while the
// watcher watches their slot and handled when the replica works it again,
// so that one should have been handled; the fence is no excuse (nil: no
// replica did). So is one that had the object when d was made, not heard
// of d, whose watch followed the slot from d to that claim: its store still
// holds the object, and its watch or its next relist reports it gone.
//
// Working it again means claiming it again before dropping the deletion,
// and either a claim that no fence or kill ended, or claims that fences
// (or the kill) ended after more than the bound in all: a queue behind a
// backlog (after an API server's restart, every replica's) may not reach
// the replayed deletion before the next fence, which holds it again.
func (j *judge) keptAndWorkedAgain(d deletion, slot int, fence time.Time) *replica {
	for _, r := range j.replicas {
		r.rec.mu.Lock()
		heard := r.rec.heardDeleted[d.incarnation]
		knew, had := r.rec.known[d.incarnation]
		had = had && !knew.After(d.At)
		droppedAt, dropped := r.rec.dropped[d.incarnation]
		worked := false
		var total time.Duration // worked in claims a fence or a kill ended
		for from := fence; heard || had; {
			again := r.rec.owns.claimedFrom(slot, from)
			if again.IsZero() || (!r.to.IsZero() && !again.Before(r.to)) ||
				dropped && droppedAt.Before(again) || // not kept to work it again
				!heard && !r.rec.watchedThrough(slot, d.At, again) { // had, but its store let it go
				break
			}
			_, c := r.rec.owns.claimedAt(slot, again)
			end := c.end
			if !r.to.IsZero() && (end.IsZero() || end.After(r.to)) {
				end = r.to // its claims ended with it
			}
			if end.IsZero() || (!c.fenced && !end.Equal(r.to)) {
				worked = true
				break
			}
			if total += end.Sub(again); total > j.bound() {
				worked = true
				break
			}
			from = end
		}
		r.rec.mu.Unlock()
		if worked {
			return r
		}
	}
	return nil
}

// lastClaim is the last claim of slot that ended before t, and whose: a
// killed replica's claims end with it, said so or not (nil: none).
func (j *judge) lastClaim(slot int, t time.Time) (last *replica, c claim) {
	c.rv = -1
	for _, r := range j.replicas {
		r.rec.mu.Lock()
		e := r.rec.owns.endedBefore(slot, t)
		if !e.end.IsZero() && e.end.After(c.end) {
			last, c = r, e
		}
		if !r.to.IsZero() && r.to.Before(t) && r.to.After(c.end) {
			if claimed, _ := r.rec.owns.claimedAt(slot, r.to); claimed {
				last, c = r, claim{end: r.to, rv: r.rec.lastRV}
			}
		}
		r.rec.mu.Unlock()
	}
	return last, c
}

// killedWith: claim c of r ended with r's kill (its stop drops its claims,
// within a second of it).
func killedWith(r *replica, c claim) bool {
	return !r.to.IsZero() && !c.end.Before(r.to.Add(-time.Second))
}

// lastClaimant says who last claimed slot before t, and how that claim
// ended: killed, fenced, let go (cause), and when.
func (j *judge) lastClaimant(slot int, t time.Time) (why, cause string, ended time.Time) {
	last, c := j.lastClaim(slot, t)
	ended = c.end
	switch {
	case last == nil:
		return "never claimed yet", "never", time.Time{}
	case killedWith(last, c):
		return fmt.Sprintf("%s, its owner, was killed %s before", last.name, t.Sub(ended).Round(100*time.Millisecond)), "killed", ended
	case c.fenced:
		return fmt.Sprintf("%s, its owner, fenced itself %s before", last.name, t.Sub(ended).Round(100*time.Millisecond)), "fenced", ended
	default:
		return fmt.Sprintf("%s let it go %s before", last.name, t.Sub(ended).Round(100*time.Millisecond)), "let go", ended
	}
}

// lost records deletion d as a loss, with what each replica saw of it.
func (j *judge) lost(v *Verdict, d deletion, f facts, why string) {
	var saw []string
	for _, r := range j.replicas {
		r.rec.mu.Lock()
		if h := r.rec.history[d.Key]; len(h) > 0 || r == f.owner {
			saw = append(saw, fmt.Sprintf("%s saw %s", r.name, strings.Join(h, "; ")))
		}
		if j.sharded {
			saw = append(saw, fmt.Sprintf("%s's claims of slot %d: %s; its watch: %s", r.name, f.slot, r.rec.owns.around(f.slot, d.At), r.rec.watchAround(f.slot, d)))
		}
		r.rec.mu.Unlock()
	}
	claimant := "no replica: " + why
	if f.owner != nil {
		claimant = f.owner.name
	}
	v.UnseenDeletions = append(v.UnseenDeletions, fmt.Sprintf("%s (uid %s, created at resourceVersion %d, slot %d, claimed by %s; %s)",
		d.Key, d.UID, d.Created, f.slot, claimant, strings.Join(saw, "; ")))
}
