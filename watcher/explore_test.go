package watcher

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/klog/v2"

	"rawwatch/api/v1alpha1"
	"rawwatch/internal/fakeapi"
	"rawwatch/internal/testkit"
	"rawwatch/observe"
	"rawwatch/store"
	"rawwatch/store/detect"
)

// The fault-schedule explorer. Each schedule, drawn from a seed, runs the
// real loop (Watcher.Run) against package fakeapi's server in virtual time
// while the server's objects churn, other resources are written (Lease
// renewals: the global resourceVersion moves without an event of ours), and
// faults come and go: every persistent fault of fakeapi.Modes (garbled
// frames and list items among them, frames cut short, frames with one bit
// flipped, frames and pages spelled as no apiserver writes them but as
// Kubernetes' decoding reads alike), and one-off cuts, compactions (410s), restarts of the watch
// cache, restarts of the apiserver (503s, then 429s to WATCHes while its
// watch cache initializes), restores of an older copy of the data the way
// etcd documents for Kubernetes (--bump-revision), rollbacks (a plain etcd
// restore to older data, the resourceVersion going back, while the control
// plane is down, or while it stays up and nothing is written until the
// loop lists: see rollbackMin; an object the loop saw written since is
// written again at the resourceVersion it had, with other content), and,
// without a watch cache, a deletion
// whose previous state etcd compacted (every WATCH from just before it is
// answered with an ERROR). The objects carry managedFields (two managers),
// as kube-apiserver writes them. The handler's deltas go,
// by key, into the real work queue, which two workers
// drain (consumer). Three schedules in four run against a server
// shaped like kube-apiserver with its watch cache (bookmarks every minute
// and 2 s before a stream ends, "0" LISTs served whole from a cache up to a
// minute behind, streams that may end a little before their timeout); the
// rest against one without (no bookmarks). Then the faults stop, and every
// schedule must hold these rules:
//
//   - request budget: in every minute of the run, at most budgetPerMinute
//     requests (WATCH, WatchList, first LIST pages; continue pages go with
//     their list), a bound that follows from the backoff (see budget);
//   - no request asks for resourceVersion "0" (a watch cache's answer,
//     possibly older than what the store had);
//   - liveness: within livenessBound of the faults stopping, the store
//     equals the server's objects (same keys, UIDs, resourceVersions,
//     content);
//   - safety: the handler's deltas, followed per UID, are a valid life —
//     Added, then Updated while present, then Deleted — and every object
//     gone from the server at the end had its Deleted delta, with its UID;
//     no UID comes back after its Deleted, and no object's resourceVersion
//     goes backwards (outside a restore: the first list after one starts
//     the count afresh);
//   - the codec reads what Kubernetes' decoding reads: every WATCH stream
//     and LIST page served under the Respell or Garble fault is decoded
//     again, as far as the loop read it, by the schedule's codec and by
//     apimachinery (metav1.WatchEvent and the object through
//     sigs.k8s.io/json, the serializer's kind, apierrors.FromObject),
//     which must agree; and so must they on one frame of every stream and
//     one page in five, respelled (explore_decode_test.go,
//     explore_respell_test.go);
//   - a garbled DELETED (its object undecodable, its name readable) still
//     deletes its key: the store no longer holds it once the loop moves on;
//   - a garbled list item (undecodable, its metadata readable) keeps its
//     key: the list does not report the object the store held deleted; one
//     of another UID (the name deleted and created again) does: the store
//     no longer holds the old object after the list;
//   - the deltas: every delta carries an object, without managedFields
//     (the store drops them); an Updated delta is a change (its old and
//     new objects differ); a DELETED event's delta carries the
//     event's final state, not marked FinalStateUnknown (only a relist's
//     and a garbled DELETED's are);
//   - the write time the loop reports for an event (Received.Written) is
//     the object's last write, the newest of its managedFields' times;
//   - the backoff, from the loop's BackoffStarted events: every wait is at
//     most Backoff.Max; a wait after trouble (not a 410's staggered relist)
//     is shortened by its jitter, so never a step Initial·Factorⁿ or Max
//     exactly (unless a 429's Retry-After set it); after a calm ResetAfter
//     (no wait, no trouble, no relist) the first wait is at most Initial
//     (or the Retry-After);
//   - from the request log: no request comes sooner than a 429's
//     Retry-After after it; a failed continue page (other than a 410) is
//     followed by that list's next continue page, not a first page (a list
//     longer than the gaps between outages completes); after a rollback, the
//     first request the server answers is a LIST (a probe or a relist) or
//     a WatchList, never a WATCH from the resourceVersion the loop had, and
//     the loop
//     lists before it applies any event of a WATCH made since, and that
//     list takes the content written again at a reused resourceVersion
//     (unless it listed it undecodable: then it keeps the stored object);
//   - the queue (see consumer): a key waits in it at most once; a deletion
//     reaches a worker before the changes that were waiting when it was
//     queued; one worker per key; retries spaced as the rate limiter says;
//     every key's last state reaches a worker;
//   - with a watch cache, a quiet healthy stream is kept: after the faults,
//     in quietStretch of no change of ours while other resources are
//     written and another apiserver's cache restarts, the loop makes no
//     LIST (probe or relist), never abandons a stream, and re-watches at
//     once after each stream that ran its course;
//   - a cut frame breaks the stream at the cut: a WATCH that sent an event
//     cut short inside a string (or, with a line-framing codec, after a
//     whole frame) is not read past it (checkCutFrames);
//   - the store (without Share) gives no two objects one labels map; its
//     mutation detector finds a reader's edit in place of a stored object
//     and of one that just left the store (checkDetector);
//   - no goroutine outlives the loop (synctest fails the test otherwise).
//
// A failing schedule prints its seed and schedule; -explore.seed=N replays
// it alone (with -v, with the loop's log).

var (
	exploreN    = flag.Int("explore.n", 0, "schedules the explorer runs (0: 10,000, or 3,000 with -race)")
	exploreSeed = flag.Uint64("explore.seed", 0, "run only this schedule")
)

// livenessBound: once faults stop, the store is synced within this. A wait
// may have up to Backoff.Max left; a stream that froze just before may stay
// silent for the whole silence limit; a slow stream or list takes the rest.
func livenessBound(o Options[*v1alpha1.MyResource]) time.Duration {
	return o.Backoff.Max + o.SilenceLimit + 30*time.Second
}

type phase struct {
	at    time.Duration
	fault fakeapi.Mode
	// one-off faults at the start of the phase
	cut, compact, cacheRestart, restore bool
	// quietRollback: etcd is restored without --bump-revision to the
	// data the run started with (if at least rollbackMin behind the
	// loop, and the loop's time to find it, livenessBound, before the
	// faults stop) while the control plane stays up (the apiserver
	// restarts at once: every stream breaks), and nothing is written
	// until the loop lists: a WATCH from the resourceVersion the loop had
	// waits in silence (a watch cache sends no bookmark behind it) until
	// the watchdog gives up on it and asks where the server is.
	quietRollback bool
	// rollback: the control plane goes down for the phase (every request
	// refused, nothing written) while etcd is restored without
	// --bump-revision to the data the run started with, if its
	// resourceVersion is at least rollbackMin behind the loop's: the
	// server's history goes back (see rollbackMin).
	rollback bool
	// losePrevKv (without a watch cache): an object is written, the
	// stream is cut, the object deleted and etcd compacted at its
	// deletion: a WATCH from just before it meets an ERROR every time
	// (fakeapi.Server.LosePrevKv).
	losePrevKv bool
	// restart: kube-apiserver restarts (fakeapi.Server.Restart): 503s
	// for restartPaths, then, with a watch cache, 429s to WATCHes for
	// restartCache while its cache initializes.
	restart                    bool
	restartPaths, restartCache time.Duration
}

// rollbackMin is how far behind the loop's resourceVersion a rollback
// must send the server's: farther than the writes of a backoff wait can bring it
// back (the churn writes at most 2 resourceVersions every 500 ms: 120 in
// Backoff.Max). A rollback the writes can undo before the loop's first
// request is one no client can see (the server's new history then passes
// the resourceVersion the client had, and its events look like the old
// ones'), which etcd's documented restore (--bump-revision) is for.
const rollbackMin = 150

type schedule struct {
	seed      uint64
	objects   int
	pageSize  int64
	watchList bool
	timeout   time.Duration
	latency   time.Duration
	// watchCache: the server answers as kube-apiserver's watch cache does,
	// bookmarks every minute, its "0" LISTs cacheLag old; its streams end
	// earlyEnd of their timeout early (0 to 5 %).
	watchCache bool
	cacheLag   time.Duration
	earlyEnd   float64
	phases     []phase
	end        time.Duration // faults stop; churn stops
	// wrap, if set, stands between the loop and the server (a test of the
	// explorer breaks the client with it).
	wrap func(Source) Source
	// codec decodes the server's answers (exploreAll's); lineFramed: it
	// breaks a line-framed stream at a newline inside a frame.
	codec      Codec[*v1alpha1.MyResource]
	lineFramed bool
}

func newSchedule(seed uint64) schedule {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	s := schedule{seed: seed, objects: r.IntN(12), pageSize: int64(1 + r.IntN(5)), watchList: r.IntN(3) == 0,
		timeout: time.Duration(1+r.IntN(5)) * time.Minute, latency: time.Duration(1+r.IntN(50)) * time.Millisecond,
		watchCache: r.IntN(4) != 0, cacheLag: time.Duration(r.IntN(61)) * time.Second, earlyEnd: float64(r.IntN(6)) / 100,
		codec: JSONCodec[*v1alpha1.MyResource]{GVK: v1alpha1.GroupVersionKind}}
	if !s.watchCache {
		s.cacheLag, s.earlyEnd = 0, 0
	}
	modes := fakeapi.Modes()
	at := time.Duration(r.IntN(20)) * time.Second
	for range 1 + r.IntN(6) {
		p := phase{at: at, fault: modes[r.IntN(len(modes))],
			cut: r.IntN(3) == 0, compact: r.IntN(3) == 0, cacheRestart: r.IntN(4) == 0 && s.watchCache, restore: r.IntN(8) == 0}
		d := time.Duration(5+r.IntN(180)) * time.Second
		p.losePrevKv = r.IntN(6) == 0 && !s.watchCache
		// With any WATCH timeout: one shorter than the silence limit ends
		// each stream from the future at its timeout with no frame, and
		// the watchdog counts the silence across them (Action.Quiet).
		p.quietRollback = r.IntN(8) == 0
		if p.restart = r.IntN(5) == 0; p.restart {
			p.restartPaths, p.restartCache = time.Duration(1+r.IntN(5))*time.Second, time.Duration(1+r.IntN(10))*time.Second
		}
		if p.rollback = r.IntN(6) == 0; p.rollback {
			// Down for longer than any backoff wait: the loop's next
			// request meets the outage, and the one after it the
			// restored server.
			p.fault, d = fakeapi.Refuse, max(d, 45*time.Second)
		}
		s.phases = append(s.phases, p)
		at += d
	}
	s.end = at
	return s
}

// quietStretch is how long the quiet healthy stretch after the faults
// lasts: long enough for the longest stream to run its course (2·timeout),
// and for the watchdog to abandon any stream it would abandon.
func (s schedule) quietStretch() time.Duration {
	return 2*s.timeout + time.Minute
}

func (s schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d objects, page size %d, watch-list %v, watch timeout %v, latency %v,", s.seed, s.objects, s.pageSize, s.watchList, s.timeout, s.latency)
	if s.watchCache {
		fmt.Fprintf(&b, " watch cache (%v behind, streams end %.0f%% early);", s.cacheLag, 100*s.earlyEnd)
	} else {
		b.WriteString(" no watch cache (no bookmarks);")
	}
	for _, p := range s.phases {
		fmt.Fprintf(&b, " at %v %s", p.at, p.fault)
		for _, x := range []struct {
			on   bool
			name string
		}{{p.cut, "cut"}, {p.compact, "compact"}, {p.cacheRestart, "cache-restart"}, {p.restore, "restore"}, {p.rollback, "rollback"}, {p.quietRollback, "quiet-rollback"}, {p.losePrevKv, "lose-prev-kv"}, {p.restart, "restart"}} {
			if x.on {
				b.WriteString("+" + x.name)
			}
		}
		b.WriteString(",")
	}
	fmt.Fprintf(&b, " healed at %v", s.end)
	return b.String()
}

// explore runs one schedule with backoff b and returns what broke ("" if
// nothing) and how long the store took to converge once the faults stopped.
func explore(t *testing.T, s schedule, b Backoff) (failure string, converged time.Duration) {
	var mu sync.Mutex
	var problems []string
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	synctest.Test(t, func(*testing.T) {
		r := rand.New(rand.NewPCG(s.seed, 0xc0ffee))
		srv := fakeapi.New()
		srv.Latency = s.latency
		srv.WatchCache, srv.CacheLag, srv.EarlyEnd = s.watchCache, s.cacheLag, s.earlyEnd
		if !s.watchCache {
			srv.BookmarkEvery = 0 // kube-apiserver without a watch cache sends none
		}
		names := make([]string, 16)
		for i := range names {
			names[i] = fmt.Sprintf("obj-%d", i)
		}
		st := store.New[*v1alpha1.MyResource]()
		st.DetectMutations()
		start := time.Now()
		reported := map[string]bool{}
		lives := &lifeChecker{store: st, start: start, backoff: b, retryAfter: time.Duration(srv.RetryAfter) * time.Second, fail: func(format string, args ...any) {
			// One report per rule: the first says it all.
			rule, _, _ := strings.Cut(format, ":")
			mu.Lock()
			first := !reported[rule]
			reported[rule] = true
			mu.Unlock()
			if first {
				fail(format, args...)
			}
		}}
		// Each write's time is recorded before any stream can carry it
		// (recorded after, a stream could deliver it first: under -race,
		// seed 25 then compared a write at a resourceVersion a rollback
		// reused with the older write's time).
		srv.Wrote = lives.wrote
		put := func(name, message string) { srv.Put("ns", name, message) }
		for i := range s.objects {
			put(names[i], "v0")
		}
		// Under the Garble fault, the list items of objects the store
		// holds as listed (same UID and resourceVersion) come undecodable:
		// the loop must keep them. So do the items of objects created
		// again under a name the store holds with another UID (deleted
		// and created while the loop was away): the loop must report
		// the stored object deleted. The new object then stays out
		// until an event of it decodes, which nothing may bring (no
		// client can tell): the explorer writes each such object again
		// once the faults stop (hidden); and each written again after a
		// rollback at the resourceVersion the store holds, whose stored
		// copy the loop keeps unseen.
		var hiddenMu sync.Mutex
		hidden := map[string]bool{}
		srv.GarbleItem = func(o *v1alpha1.MyResource) bool {
			got, ok := st.Get(o.Namespace + "/" + o.Name)
			// (the same UID and resourceVersion, other content: written
			// again after a rollback; the stored object is kept unseen)
			if ok && (got.UID != o.UID || got.ResourceVersion == o.ResourceVersion && got.Spec.Message != o.Spec.Message) {
				hiddenMu.Lock()
				hidden[o.Name] = true
				hiddenMu.Unlock()
			}
			return ok && (got.UID != o.UID || got.ResourceVersion == o.ResourceVersion)
		}
		var deltas []store.Delta[*v1alpha1.MyResource]
		// left: the last object handed out as it left the store (a
		// Deleted delta's, an Updated delta's Old), and when.
		var left *v1alpha1.MyResource
		var leftAt time.Time
		work := newConsumer(st, start, lives.fail)
		opts := Options[*v1alpha1.MyResource]{
			PageSize: s.pageSize, WatchList: s.watchList, Backoff: b, SilenceLimit: DefaultSilenceLimit,
			WatchTimeoutMin: s.timeout, WatchTimeoutMax: 2 * s.timeout,
			Rand:  rand.New(rand.NewPCG(s.seed, 0xbac0ff)).Float64,
			Codec: s.codec,
			Handler: func(d store.Delta[*v1alpha1.MyResource]) {
				deltas = append(deltas, d)
				switch {
				case d.Type == store.Deleted:
					left, leftAt = d.Object, time.Now()
				case d.Old != nil:
					left, leftAt = d.Old, time.Now()
				}
				lives.handle(d)
				work.add(d.Key)
			},
			Observer: lives,
		}
		var src Source = srv
		if s.wrap != nil {
			src = s.wrap(srv)
		}
		src = decodedAsKubernetes{Source: src, codec: s.codec, fail: lives.fail, when: func() bool {
			// The faults whose frames are whole but not the server's usual
			// (cut and corrupted frames: checkCorruptedFrames).
			return srv.Fault() == fakeapi.Respell || srv.Fault() == fakeapi.Garble
		}}
		w := New(src, st, opts)
		ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), exploreLogger()))
		done := make(chan struct{})
		go func() { w.Run(ctx); close(done) }()

		// rewrite writes again, after a rollback, an object the store holds
		// as written since the data restored (the same UID, a newer
		// resourceVersion), with other content, at the very resourceVersion
		// the store holds it at: the restored server gives that
		// resourceVersion out again (writes to other resources bring it
		// there). Only if the server then stays margin behind the loop, for
		// the loop to find the rollback (see rollbackMin).
		rewrites := 0
		rewrite := func(margin int64) {
			loop, restored := rvNumber(w.ResourceVersion()), srv.Objects()
			for _, name := range names {
				o := restored["ns/"+name]
				got, ok := st.Get("ns/" + name)
				if o == nil || !ok || got.UID != o.UID {
					continue
				}
				at := rvNumber(got.ResourceVersion)
				if at <= rvNumber(srv.ResourceVersion()) || loop-at < margin {
					continue
				}
				for rvNumber(srv.ResourceVersion()) < at-1 {
					srv.WriteOther()
				}
				rewrites++
				msg := fmt.Sprintf("written again after rollback %d", rewrites)
				put(name, msg)
				lives.rewrote("ns/"+name, got.ResourceVersion, msg)
				return
			}
		}

		// Faults and churn until s.end; other resources are written
		// about every 5 s (Lease renewals and the like).
		saved := srv.Save()
		origin := saved
		var rollbacks []time.Time
		var highest int64 // the highest resourceVersion before a rollback
		next := 0
		down := false // a rollback's outage: nothing is written
		// A quiet rollback the loop has not found yet (it has not listed
		// since): nothing is written, so that the server stays behind.
		quietRollback := false
		for time.Since(start) < s.end {
			for next < len(s.phases) && time.Since(start) >= s.phases[next].at {
				p := s.phases[next]
				srv.SetFault(p.fault)
				down = p.rollback
				if p.rollback && rvNumber(w.ResourceVersion())-rvNumber(origin.ResourceVersion()) >= rollbackMin {
					highest = max(highest, rvNumber(srv.ResourceVersion()))
					srv.Restore(origin, 0)
					lives.restored(srv.ResourceVersion())
					rewrite(rollbackMin) // the writes after the outage must not reach the loop's
					rollbacks = append(rollbacks, time.Now())
					lives.rolledBack()
				}
				if p.quietRollback && s.end-time.Since(start) >= livenessBound(opts) && rvNumber(w.ResourceVersion())-rvNumber(origin.ResourceVersion()) >= rollbackMin {
					highest = max(highest, rvNumber(srv.ResourceVersion()))
					srv.Restore(origin, 0)
					lives.restored(srv.ResourceVersion())
					rewrite(rollbackMin) // (after the faults, the liveness check's writes)
					lives.rolledBack()
					quietRollback = true
				}
				quietRollback = quietRollback && lives.rollback.Load()
				quiet := down || quietRollback
				if p.restore {
					// etcd's documented restore (the revision bumped, history
					// compacted): a restore that lets the resourceVersion go
					// back is caught only if the watcher reconnects before new
					// writes pass the version it had (TestTimeTravel...).
					// The bump goes 100,000 past the highest resourceVersion
					// the server ever gave (a rollback may have sent it back).
					srv.Restore(saved, max(highest, rvNumber(srv.ResourceVersion()))-rvNumber(saved.ResourceVersion())+100000)
					lives.restored(srv.ResourceVersion())
				}
				if p.compact {
					srv.Compact()
				}
				if p.cacheRestart {
					srv.RestartCache(true)
				}
				if p.cut {
					srv.Cut()
				}
				if p.restart {
					srv.Restart(p.restartPaths, p.restartCache)
				}
				if p.losePrevKv && !quiet {
					name := names[r.IntN(len(names))]
					put(name, "v-last")
					time.Sleep(200 * time.Millisecond) // its event reaches the loop
					srv.Cut()
					srv.Delete("ns", name)
					srv.LosePrevKv()
				}
				saved = srv.Save()
				next++
			}
			name, op, msg, other := names[r.IntN(len(names))], r.IntN(4), fmt.Sprintf("v%d", r.IntN(1000)), r.IntN(2) == 0
			quietRollback = quietRollback && lives.rollback.Load()
			quiet := down || quietRollback
			switch {
			case quiet:
			case op == 0:
				srv.Delete("ns", name)
			default:
				put(name, msg)
			}
			if other && !quiet {
				srv.WriteOther()
			}
			time.Sleep(time.Duration(500+r.IntN(4500)) * time.Millisecond)
		}
		srv.SetFault(fakeapi.Healthy)
		healed := time.Now()
		objs := srv.Objects()
		hiddenMu.Lock()
		for _, name := range names {
			if hidden[name] && objs["ns/"+name] != nil {
				put(name, "written again after the faults")
			}
		}
		hiddenMu.Unlock()

		// Liveness: the store converges within the bound.
		limit := livenessBound(opts)
		for !storeEqualsServer(st, srv) && time.Since(healed) <= limit {
			time.Sleep(time.Second)
			srv.WriteOther()
		}
		converged = time.Since(healed)
		if !storeEqualsServer(st, srv) {
			fail("liveness: the store still differs from the server %v after the faults stopped (bound %v)", converged, limit)
		} else if s.watchCache {
			quietStretch(s, srv, start, fail)
		}
		cancel()
		<-done
		work.finish()
		if shared := sharedLabels(st); shared != "" {
			fail("the store shares no labels map unasked: %s (a reader that edits one's labels in place edits the other's)", shared)
		}
		checkDetector(st, left, time.Since(leftAt), fail)

		// Budget: every 60 s window of the run; and no "0".
		reqs := srv.Requests()
		max := testkit.RequestBudget(DefaultBackoff.Delay)
		for i := range reqs {
			n := 0
			for _, q := range reqs[i:] {
				if q.At.Sub(reqs[i].At) >= time.Minute {
					break
				}
				if !q.Continue {
					n++
				}
			}
			if n > max {
				fail("budget: %d requests in the minute from %v, bound %d", n, reqs[i].At.Sub(start), max)
				break
			}
		}
		for _, q := range reqs {
			if q.RV == "0" {
				fail(`no resourceVersion "0": a %s at %v asked for it (a watch cache answers it with what it holds, whole and possibly older than the store)`, q.Kind, q.At.Sub(start))
				break
			}
		}
		checkRequests(reqs, rollbacks, start, fail)
		checkErrorsAfterProgress(reqs, s.pageSize, b.ResetAfter, start, fail)
		checkCorruptedFrames(reqs, s.pageSize, start, fail)
		checkCutFrames(reqs, s.lineFramed, start, fail)
		checkStartingServer(reqs, s.pageSize, start, fail)
		// Safety: the life of every UID, from the deltas.
		checkLives(deltas, srv, fail)
	})
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		return strings.Join(problems, "; "), converged
	}
	return "", converged
}

// checkRequests holds the request log to the rules of a 429, of a failed
// list and of a rollback.
func checkRequests(reqs []fakeapi.Request, rollbacks []time.Time, start time.Time, fail func(string, ...any)) {
	for i, q := range reqs[:max(len(reqs)-1, 0)] {
		next, at := reqs[i+1], q.At.Sub(start).Round(time.Millisecond)
		if gap := next.At.Sub(q.At); q.Code == 429 && gap < q.RetryAfter {
			fail("no request sooner than a 429's Retry-After: a %s at %v was answered 429 with Retry-After %v, and the next request came %v later",
				q.Kind, at, q.RetryAfter, gap.Round(time.Millisecond))
			break
		}
		if q.Kind == "LIST" && q.Continue && (q.Refused || q.Code != 0 && q.Code != 410) && (next.Kind != "LIST" || !next.Continue) {
			fail("a failed list resumes from the page that failed: the continue page asked for at %v failed (status %d), and the next request was a %s of the first page",
				at, q.Code, next.Kind)
			break
		}
	}
	for _, t := range rollbacks {
		for _, q := range reqs {
			if !q.At.After(t) || q.Refused || q.Code != 0 {
				continue
			}
			if q.Kind == "WATCH" { // (a WATCHLIST lists: the relist after a starting server's answer)
				fail("a rollback is found at once: the server was restored to older data at %v, and the first request it answered after its outage was a %s from resourceVersion %s (which waits in silence for the server to get there), not a LIST",
					t.Sub(start).Round(time.Millisecond), q.Kind, q.RV)
			}
			break
		}
	}
}

// checkErrorsAfterProgress holds the request log to the rule of an ERROR
// after progress: a stream that carried the loop past the resourceVersion
// it started from and then ended in an ERROR (a 500) is re-watched from its
// last event's resourceVersion, once; the next such stream before a list
// or a healthy stream (refused, cut or failed WATCHes between do not count)
// relists. Lists reset the count; a stream that may have been healthy (open
// for most of its timeout or of ResetAfter) leaves it unknown until the
// next such stream shows what the loop made of it. A LIST of one item is a
// probe, unless the pages are of one item too (then unknown).
func checkErrorsAfterProgress(reqs []fakeapi.Request, pageSize int64, resetAfter time.Duration, start time.Time, fail func(string, ...any)) {
	const (
		clear = iota
		erroredOn
		unknown
	)
	state := clear
	for i, q := range reqs {
		switch {
		case q.Kind == "LIST" && q.Continue:
		case q.Kind == "LIST" && q.Limit == 1 && pageSize == 1:
			state = unknown // a probe or a list
		case q.Kind == "LIST" && q.Limit == 1: // a probe
		case q.Kind != "WATCH": // a list
			state = clear
		}
		if q.Kind == "LIST" {
			continue
		}
		if q.ErrorAfter == "" {
			if opened := q.Code == 0 && !q.Refused; opened && (q.Ended.IsZero() || q.Ended.Sub(q.At) >= min(q.Timeout, resetAfter)*8/10) {
				state = unknown // maybe healthy
			}
			continue
		}
		if i+1 == len(reqs) {
			break
		}
		next, at := reqs[i+1], q.At.Sub(start).Round(time.Millisecond)
		relist := next.Kind == "WATCHLIST" || next.Kind == "LIST" && !next.Continue && (next.Limit != 1 || pageSize == 1)
		switch {
		case state == clear && (next.Kind != "WATCH" || next.RV != q.ErrorAfter):
			fail("an ERROR after progress is re-watched from there: the %s made at %v carried the event at resourceVersion %s, then an ERROR 500, the first since the last list or healthy stream, and the next request was a %s from resourceVersion %q",
				q.Kind, at, q.ErrorAfter, next.Kind, next.RV)
			return
		case state == erroredOn && !relist:
			fail("a second ERROR after progress in a row relists: the %s made at %v carried the event at resourceVersion %s, then an ERROR 500, as the stream re-watched after the last one did, and the next request was a %s from resourceVersion %q (limit %d), not a list",
				q.Kind, at, q.ErrorAfter, next.Kind, next.RV, next.Limit)
			return
		}
		state = erroredOn // (a list next clears it)
	}
}

// checkCorruptedFrames: an event the loop could not read is read again. A
// WATCH that sent an event corrupted (its JSON broken, its frame whole) is
// followed, unless a list comes first, by a WATCH from a resourceVersion
// before that event's: the loop broke the stream there, and did not skip
// the event to read on (a later event or bookmark would carry it past the
// lost one). A LIST of one item is a probe, unless pages are of one item.
func checkCorruptedFrames(reqs []fakeapi.Request, pageSize int64, start time.Time, fail func(string, ...any)) {
	for i, q := range reqs {
		if q.Kind != "WATCH" || q.Corrupted == "" {
			continue
		}
		for _, next := range reqs[i+1:] {
			if next.Kind == "LIST" && next.Limit == 1 && !next.Continue && pageSize != 1 {
				continue // a probe
			}
			if next.Kind == "WATCH" && rvNumber(next.RV) >= rvNumber(q.Corrupted) {
				fail("an event the loop cannot read is read again: the WATCH made at %v sent the event at resourceVersion %s corrupted, and the next WATCH asked for resourceVersion %s, past it",
					q.At.Sub(start).Round(time.Millisecond), q.Corrupted, next.RV)
				return
			}
			break
		}
	}
}

// checkCutFrames: a cut frame breaks the stream at the cut. A WATCH that
// sent an event cut short (CutFrames) where the reader can tell at once —
// inside a string, whose raw newline JSON forbids, or, with a line-framing
// codec, after a whole frame and its newline — is not read past it: a
// reader that reads on swallows the next frame into the cut one, and hears
// of the cut only when a frame after it comes, if one does.
func checkCutFrames(reqs []fakeapi.Request, lineFramed bool, start time.Time, fail func(string, ...any)) {
	for _, q := range reqs {
		if q.Cut == "" || !q.ReadAfterCut || !q.CutInString && !(q.CutLined && lineFramed) {
			continue
		}
		where := "inside a string"
		if !q.CutInString {
			where = "after a whole frame and its newline"
		}
		fail("a cut frame breaks the stream at the cut: the %s made at %v sent the event at resourceVersion %s cut short %s, and the client read the frame after it",
			q.Kind, q.At.Sub(start).Round(time.Millisecond), q.Cut, where)
		return
	}
}

// checkStartingServer: a starting server is relisted. A WATCH a restarted
// apiserver refused as a starting one does (a 503 before its paths are
// installed, a 429 while its watch cache initializes) is followed by a list
// (a first LIST page, or a WatchList), not by a probe or the WATCH again:
// the cache's history begins where it started, after the loop's
// resourceVersion once anything was written, so the WATCH after a probe
// would meet a 410 and list all the same, two requests later. Unless no
// WATCH opened since the loop's last list (it may be the list made since
// the server started: its WATCH is tried again after the wait). A LIST of
// one item is a probe, unless pages are of one item too.
func checkStartingServer(reqs []fakeapi.Request, pageSize int64, start time.Time, fail func(string, ...any)) {
	opened := false // a WATCH opened since the last list
	for i, q := range reqs {
		probe := q.Kind == "LIST" && q.Limit == 1 && !q.Continue && pageSize != 1
		switch {
		case q.Continue, probe:
		case q.Kind != "WATCH":
			opened = false
		case q.Code == 0 && !q.Refused:
			opened = true
		case q.Starting && opened && i+1 < len(reqs):
			next := reqs[i+1]
			if next.Kind == "WATCH" || next.Kind == "LIST" && (next.Continue || next.Limit == 1 && pageSize != 1) {
				what := "a WATCH"
				if next.Kind == "LIST" {
					what = "a probe (a LIST of one item)"
				}
				fail("a starting server is relisted: the WATCH made at %v from resourceVersion %s was answered %d by a server that had just restarted, and the next request was %s, not a list",
					q.At.Sub(start).Round(time.Millisecond), q.RV, q.Code, what)
				return
			}
		}
	}
}

// quietStretch holds a quiet healthy stream to its cost: after the faults,
// with no change of ours, other resources written every 10 s and bookmarks
// every minute, a stream runs its course and is followed at once by the
// next WATCH, from the last bookmark's resourceVersion; nothing else. It
// first cuts every stream (one opened under a fault, a frozen one, may
// still be open), waits for the re-watch, then restarts another
// apiserver's watch cache (the next WATCH may reach it: from a bookmark's
// resourceVersion it goes on, from the last event's it meets a 410) and
// lets s.quietStretch pass.
func quietStretch(s schedule, srv *fakeapi.Server, start time.Time, fail func(string, ...any)) {
	srv.Cut()
	var from int
	opened := false
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
		time.Sleep(time.Second)
		srv.WriteOther()
		reqs := srv.Requests()
		if last := reqs[len(reqs)-1]; last.Kind != "LIST" && last.Ended.IsZero() {
			from, opened = len(reqs)-1, true
			break
		}
	}
	if !opened {
		fail("a quiet healthy stream is kept: no WATCH open 2 minutes after a cut, with no fault")
		return
	}
	time.Sleep(5 * time.Second)
	srv.WriteOther()
	srv.RestartCache(false)
	for t0 := time.Now(); time.Since(t0) < s.quietStretch(); {
		time.Sleep(10 * time.Second)
		srv.WriteOther()
	}
	reqs := srv.Requests()[from:]
	for i, q := range reqs {
		at := q.At.Sub(start).Round(time.Millisecond)
		switch {
		case q.Kind != "WATCH" && i > 0: // (the first may be a WatchList that goes on)
			why := "a relist"
			if q.Limit == 1 {
				why = "a probe"
			}
			if i > 0 && reqs[i-1].Gone {
				why += fmt.Sprintf(", after the WATCH from resourceVersion %s met a 410", reqs[i-1].RV)
			}
			fail("a quiet healthy stream is kept: a %s at %v, %s, in a quiet stretch with bookmarks every minute", q.Kind, at, why)
			return
		case q.Ended.IsZero(), q.Gone: // open at the end; a 410 (the LIST after it says so)
		case q.ClosedByClient:
			fail("a quiet healthy stream is kept: the client abandoned the WATCH it made at %v from resourceVersion %s, %v later (timeout %v), though bookmarks came every minute",
				at, q.RV, q.Ended.Sub(q.At).Round(time.Millisecond), q.Timeout)
			return
		case i+1 < len(reqs):
			if gap := reqs[i+1].At.Sub(q.Ended); gap > s.latency+100*time.Millisecond {
				fail("a quiet healthy stream is kept: the WATCH made at %v (timeout %v) ran its course, ended by the server %v later, and the next request came %v after that (a backoff: it did not count as healthy)",
					at, q.Timeout, q.Ended.Sub(q.At).Round(time.Millisecond), gap.Round(time.Millisecond))
				return
			}
		}
	}
}

// lifeChecker follows, on the loop's goroutine, what the handler is handed
// and what the loop observes, and holds them to the rules of the deltas, the
// decoder, the backoff and the rollbacks (see the explorer's doc).
type lifeChecker struct {
	store      *store.Store[*v1alpha1.MyResource]
	start      time.Time
	backoff    Backoff
	retryAfter time.Duration
	fail       func(string, ...any)

	deleted map[types.UID]bool
	rv      map[types.UID]int64
	// restoredAt is the resourceVersion of the last restore, restores
	// counts them; afresh is the count when the counts last started afresh.
	restoredAt, restores atomic.Int64
	afresh               int64
	// garbled is a key whose DELETED arrived garbled while the store held
	// it (with uid), to be gone by the next event.
	garbled string
	uid     types.UID
	rvOf    string

	// writtenAt: when each resourceVersion was written (to the second),
	// by the explorer's goroutine.
	mu        sync.Mutex
	writtenAt map[string]time.Time
	// event: the watch event being applied (its deltas follow it).
	event Received
	// Garbled list items whose key the store held (with that UID): on the
	// page being read (page), and on the pages of the list so far (kept).
	page, kept map[string]itemOf
	initial    bool // a WatchList's initial events are being read
	// The backoff: the state the last transition went to, and since when
	// the loop has been calm (no trouble, no wait, no relist) for sure.
	to   State
	calm time.Time
	// rollback: the server was restored to older data and the loop has
	// not listed since; rollbackStream: a WATCH was made since then.
	rollback, rollbackStream, rollbackList atomic.Bool
	// rewritten: objects written again after a rollback at a
	// resourceVersion the store held them at, with their new message, by
	// key (under mu).
	rewritten map[string]rewrite
}

// rewrite is an object written again at a reused resourceVersion.
type rewrite struct{ rv, message string }

// rewrote records that key was written again at rv, a resourceVersion
// the store holds it at, with message.
func (l *lifeChecker) rewrote(key, rv, message string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rewritten == nil {
		l.rewritten = map[string]rewrite{}
	}
	l.rewritten[key] = rewrite{rv, message}
}

// restored records that the server's data was restored at rv: what was
// written again before is gone.
func (l *lifeChecker) restored(rv string) {
	l.restoredAt.Store(rvNumber(rv))
	l.restores.Add(1)
	l.mu.Lock()
	l.rewritten = nil
	l.mu.Unlock()
}

func (l *lifeChecker) rolledBack() {
	l.rollbackStream.Store(false)
	l.rollbackList.Store(false)
	l.rollback.Store(true)
}

// wrote records that the object at resourceVersion rv was written at at.
func (l *lifeChecker) wrote(rv string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.writtenAt == nil {
		l.writtenAt = map[string]time.Time{}
	}
	l.writtenAt[rv] = at
}

func (l *lifeChecker) Observe(e observe.Event) {
	now := time.Now()
	at := now.Sub(l.start).Round(time.Millisecond)
	if l.garbled != "" {
		if got, ok := l.store.Get(l.garbled); ok && got.UID == l.uid {
			l.fail("a garbled DELETED still deletes its key: %s (UID %s) is still in the store at %v, after its DELETED (resourceVersion %s) arrived undecodable",
				l.garbled, l.uid, at, l.rvOf)
		}
		l.garbled = ""
	}
	if _, ok := e.(Handed); !ok {
		l.event = Received{}
	}
	if l.calm.IsZero() {
		l.calm = l.start
	}
	switch e := e.(type) {
	case Skipped:
		if e.Err.Key == "" {
			return
		}
		if e.Err.What == "list item" || l.initial {
			if got, ok := l.store.Get(e.Err.Key); ok {
				if l.page == nil {
					l.page = map[string]itemOf{}
				}
				l.page[e.Err.Key] = itemOf{stored: got.UID, same: e.Err.UID == "" || e.Err.UID == got.UID}
			}
			if l.initial { // a WatchList: one stream, one list
				l.listPage(false)
			}
			return
		}
		if e.Err.What != Deleted+" event" {
			return
		}
		got, ok := l.store.Get(e.Err.Key)
		if !ok {
			return
		}
		// (its resourceVersion unreadable: it is the stored object's deletion all the same)
		if c, err := resourceversion.CompareResourceVersion(got.ResourceVersion, e.Err.RV); err == nil && c < 0 || e.Err.RV == "" {
			l.garbled, l.uid, l.rvOf = e.Err.Key, got.UID, e.Err.RV
		}
	case ListPage:
		l.listPage(e.Page == 1)
		if e.Page == 1 && l.rollback.Load() {
			l.rollbackList.Store(true)
		}
	case WatchStarted:
		l.initial, l.kept, l.page = e.InitialEvents, nil, nil
		if l.rollback.Load() {
			l.rollbackStream.Store(true)
			l.rollbackList.Store(e.InitialEvents)
		}
	case WatchEnded:
		l.initial = false
	case Replaced:
		for key, item := range l.kept {
			got, ok := l.store.Get(key)
			if item.same && (!ok || got.UID != item.stored) {
				l.fail("a garbled list item keeps its key: %s (UID %s) was listed undecodable and is gone from the store after the list at resourceVersion %s (at %v)",
					key, item.stored, e.RV, at)
			}
			if !item.same && ok && got.UID == item.stored {
				l.fail("a garbled list item of another UID deletes the stored object: %s was listed undecodable under another UID, and the store still holds the old one (UID %s) after the list at resourceVersion %s (at %v)",
					key, item.stored, e.RV, at)
			}
		}
		garbled := l.kept
		l.kept, l.page, l.initial = nil, nil, false
		if l.rollbackList.Load() {
			l.rollback.Store(false)
			l.mu.Lock()
			for key, re := range l.rewritten {
				if _, unread := garbled[key]; unread {
					continue // listed undecodable: its stored object is kept, unseen
				}
				if got, ok := l.store.Get(key); ok && got.ResourceVersion == re.rv && got.Spec.Message != re.message {
					l.fail("a relist after a rollback takes what the server lists: %s was written again at resourceVersion %s (a rollback gave it out again) with %q, and the store still holds %q after the list at resourceVersion %s (at %v)",
						key, re.rv, re.message, got.Spec.Message, e.RV, at)
				}
			}
			l.rewritten = nil
			l.mu.Unlock()
		}
		if n := l.restores.Load(); n > l.afresh && rvNumber(e.RV) >= l.restoredAt.Load() {
			l.afresh = n
			l.deleted, l.rv = nil, nil
		}
	case Received:
		l.event = e
		if l.rollback.Load() && l.rollbackStream.Load() {
			l.fail("a rollback is relisted before its events are applied: %s %s at resourceVersion %s at %v, from a server restored to older data, and no list since",
				e.Type, e.Key, e.RV, at)
		}
		if e.Type == Deleted {
			return
		}
		l.mu.Lock()
		want, ok := l.writtenAt[e.RV]
		l.mu.Unlock()
		if ok && !e.Written.Equal(want) {
			l.fail("the write time is the last write's: %s %s at resourceVersion %s was written at %v (its newest managedFields time), and the loop reported %v",
				e.Type, e.Key, e.RV, want.Sub(l.start), e.Written.Sub(l.start))
		}
	case StateChanged:
		l.page = nil // a list that failed: its last page is read again
		l.to = e.To
		if e.To == Relisting {
			l.calm = now // maybe a 410's relist: the calm ends
		}
	case BackoffStarted:
		l.backedOff(e, at)
		l.calm = now.Add(e.Delay)
	}
}

// itemOf is a garbled list item of a key the store held: the stored UID,
// and whether the item's (readable) UID is that one.
type itemOf struct {
	stored types.UID
	same   bool
}

// listPage: a list page was read; first: the first of a list.
func (l *lifeChecker) listPage(first bool) {
	if first || l.kept == nil {
		l.kept = map[string]itemOf{}
	}
	maps.Copy(l.kept, l.page)
	l.page = nil
}

// backedOff holds a wait to the backoff: at most Max; a wait after
// trouble (not a 410's staggered relist) shortened by its jitter, so never
// a step Initial·Factorⁿ or Max exactly (unless a 429's Retry-After set
// it); and at most Initial (or the Retry-After) after a calm ResetAfter.
func (l *lifeChecker) backedOff(e BackoffStarted, at time.Duration) {
	b := l.backoff
	if e.Delay > b.Max && !(e.Class == Throttled && e.Delay == l.retryAfter) {
		l.fail("every wait is at most Backoff.Max: a wait of %v at %v after a %s error (Max %v)", e.Delay, at, e.Class, b.Max)
	}
	if l.to != BackingOff || e.Class == Throttled && e.Delay == l.retryAfter {
		return // a 410's staggered relist; a Retry-After
	}
	for n := 0; ; n++ {
		step := b.Delay(n, 0)
		if e.Delay == step {
			l.fail("jitter shortens every wait: a wait of %v at %v after a %s error is step %d of the backoff exactly (clients back from one outage would retry in step)",
				e.Delay, at, e.Class, n)
		}
		if step >= b.Max {
			break
		}
	}
	if calm := time.Since(l.calm); calm >= b.ResetAfter && e.Delay > max(b.Initial, l.retryAfter) {
		l.fail("after a calm Backoff.ResetAfter the first wait is at most Initial: a wait of %v at %v after a %s error, %v after the last trouble (ResetAfter %v, Initial %v)",
			e.Delay, at, e.Class, calm.Round(time.Millisecond), b.ResetAfter, b.Initial)
	}
}

func (l *lifeChecker) handle(d store.Delta[*v1alpha1.MyResource]) {
	if l.deleted == nil {
		l.deleted, l.rv = map[types.UID]bool{}, map[types.UID]int64{}
	}
	at := time.Since(l.start).Round(time.Millisecond)
	if d.Object == nil {
		l.fail("every delta carries an object: a %s delta of %s at %v has none", d.Type, d.Key, at)
		return
	}
	if len(d.Object.ManagedFields) > 0 {
		l.fail("the store drops managedFields: a %s delta of %s at %v carries %d entries", d.Type, d.Key, at, len(d.Object.ManagedFields))
	}
	if d.Type == store.Updated && d.Old != nil && d.Old.ResourceVersion == d.Object.ResourceVersion && reflect.DeepEqual(d.Old, d.Object) {
		l.fail("an Updated delta is a change: %s at %v was handed as updated from resourceVersion %s to the same, with the same content", d.Key, at, d.Object.ResourceVersion)
	}
	if d.Type == store.Deleted && d.FinalStateUnknown && l.event.Type == Deleted && l.event.Key == d.Key {
		l.fail("a DELETED event's delta carries the server's final state: %s at %v was deleted at resourceVersion %s, and its delta carries resourceVersion %s, marked FinalStateUnknown",
			d.Key, at, l.event.RV, d.Object.ResourceVersion)
	}
	uid := d.Object.UID
	if d.Type == store.Deleted {
		l.deleted[uid] = true
		return
	}
	if l.deleted[uid] {
		l.fail("no UID comes back after its deletion: %s %s (UID %s) at resourceVersion %s at %v, after its Deleted delta",
			d.Type, d.Key, uid, d.Object.ResourceVersion, at)
	}
	n, _ := strconv.ParseInt(d.Object.ResourceVersion, 10, 64)
	if last, ok := l.rv[uid]; ok && n < last {
		l.fail("no object's resourceVersion goes backwards: %s %s (UID %s) at resourceVersion %d at %v, after %d",
			d.Type, d.Key, uid, n, at, last)
	}
	l.rv[uid] = n
}

// exploreLogger discards the loop's log, unless -explore.seed replays one
// schedule with -v: then it is printed.
func exploreLogger() logr.Logger {
	if *exploreSeed != 0 && testing.Verbose() {
		return funcr.New(func(prefix, args string) { fmt.Println(time.Now().Format("15:04:05.000"), prefix, args) }, funcr.Options{Verbosity: 4})
	}
	return funcr.New(func(string, string) {}, funcr.Options{})
}

func rvNumber(rv string) int64 {
	n, _ := strconv.ParseInt(rv, 10, 64)
	return n
}

// checkDetector: the mutation detector finds a reader's edit in place of
// a stored object, and of left, the last object handed out as it left the
// store, if that was at most detect.Retain ago. Once the loop has stopped:
// a difference the detector finds on a write panics.
func checkDetector(st *store.Store[*v1alpha1.MyResource], left *v1alpha1.MyResource, since time.Duration, fail func(string, ...any)) {
	edited := func(o *v1alpha1.MyResource, what string) {
		key := o.Namespace + "/" + o.Name
		if err := st.CheckMutations(); err == nil || !strings.Contains(err.Error(), key) {
			fail("the mutation detector finds a reader's edit in place: %s %s was edited, and the detector says %v", what, key, err)
		}
	}
	if keys := st.Keys(); len(keys) > 0 {
		o, _ := st.Get(keys[0])
		msg := o.Spec.Message
		o.Spec.Message += " (edited in place)"
		edited(o, "the stored object")
		o.Spec.Message = msg
	}
	if left != nil && since <= detect.Retain {
		left.Spec.Message += " (edited in place)"
		edited(left, "the object that left the store")
	}
}

// sharedLabels names two stored objects that hold one labels map ("" if
// none do).
func sharedLabels(st *store.Store[*v1alpha1.MyResource]) string {
	held := map[unsafe.Pointer]string{}
	for _, key := range st.Keys() {
		o, _ := st.Get(key)
		if o.Labels == nil {
			continue
		}
		p := reflect.ValueOf(o.Labels).UnsafePointer()
		if other, ok := held[p]; ok {
			return fmt.Sprintf("%s and %s hold one", other, key)
		}
		held[p] = key
	}
	return ""
}

func storeEqualsServer(st *store.Store[*v1alpha1.MyResource], srv *fakeapi.Server) bool {
	objs := srv.Objects()
	if st.Len() != len(objs) {
		return false
	}
	for key, o := range objs {
		got, ok := st.Get(key)
		if !ok || got.UID != o.UID || got.ResourceVersion != o.ResourceVersion || got.Spec.Message != o.Spec.Message {
			return false
		}
	}
	return true
}

func checkLives(deltas []store.Delta[*v1alpha1.MyResource], srv *fakeapi.Server, fail func(string, ...any)) {
	present := map[string]bool{}
	for i, d := range deltas {
		if d.Object == nil {
			continue // (lifeChecker.handle reported it)
		}
		uid := string(d.Object.UID)
		switch d.Type {
		case store.Added:
			if present[uid] {
				fail("safety: delta %d adds %s (UID %s), already present", i, d.Key, uid)
			}
			present[uid] = true
		case store.Updated:
			if !present[uid] {
				fail("safety: delta %d updates %s (UID %s), not present", i, d.Key, uid)
			}
		case store.Deleted:
			if !present[uid] {
				fail("safety: delta %d deletes %s (UID %s), not present", i, d.Key, uid)
			}
			present[uid] = false
		}
	}
	onServer := map[string]bool{}
	for _, o := range srv.Objects() {
		onServer[string(o.UID)] = true
	}
	for uid, p := range present {
		if p != onServer[uid] {
			fail("safety: UID %s present in the deltas %v, on the server %v", uid, p, onServer[uid])
		}
	}
}

func TestExplorer(t *testing.T) {
	exploreAll(t, JSONCodec[*v1alpha1.MyResource]{GVK: v1alpha1.GroupVersionKind}, false)
}

// exploreAll runs the explorer's schedules, its watchers decoding with c
// (explore_codec_test.go runs them with package codec's too); lineFramed:
// c breaks a line-framed stream at a newline inside a frame (JSONCodec,
// client-go's framer, reads across it).
func exploreAll(t *testing.T, c Codec[*v1alpha1.MyResource], lineFramed bool) {
	n := *exploreN
	if n == 0 {
		n = 10000
		if raceEnabled {
			n = 3000
		}
		if testing.Short() {
			n = 300 // a sample under -short (make unit); make test runs them all
		}
	}
	seeds := []uint64{*exploreSeed}
	if *exploreSeed == 0 {
		seeds = seeds[:0]
		for i := range n {
			seeds = append(seeds, uint64(i+1))
		}
	}
	start := time.Now()
	var mu sync.Mutex
	var longest time.Duration
	var failed int
	t.Run("schedules", func(t *testing.T) {
		for _, seed := range seeds {
			t.Run(fmt.Sprint(seed), func(t *testing.T) {
				t.Parallel()
				s := newSchedule(seed)
				s.codec, s.lineFramed = c, lineFramed
				failure, converged := explore(t, s, DefaultBackoff)
				mu.Lock()
				defer mu.Unlock()
				longest = max(longest, converged)
				if failure != "" {
					failed++
					t.Errorf("%s\n  broke: %s\n  replay: go test ./watcher -run TestExplorer -explore.seed=%d", s, failure, seed)
				}
			})
		}
	})
	t.Logf("%d schedules in %v (%d failed); budget %d requests/minute; slowest convergence %v after the faults stopped",
		len(seeds), time.Since(start).Round(time.Millisecond), failed, testkit.RequestBudget(DefaultBackoff.Delay), longest)
}

// The explorer must catch a broken rule: with a reset window of a
// nanosecond, any stream that got an answer counts as healthy and resets the
// backoff — the old rule, under which a stream that broke after one frame
// was healthy — and some schedule must storm past the budget.
func TestExplorerCatchesABrokenRule(t *testing.T) {
	broken := DefaultBackoff
	broken.ResetAfter = time.Nanosecond
	for seed := uint64(1); seed <= 200; seed++ {
		s := newSchedule(seed)
		if failure, _ := explore(t, s, broken); strings.Contains(failure, "budget") {
			t.Logf("caught at schedule %s: %s", s, failure)
			return
		}
	}
	t.Fatal("200 schedules with the backoff reset after every stream, and the explorer saw no storm")
}

// The explorer must catch a client that lists at resourceVersion "0" (a
// Source that rewrites its lists stands in for the bug): the request
// itself, and what a watch cache a minute behind answers it with, UIDs
// deleted before coming back and resourceVersions going backwards.
func TestExplorerCatchesListsFromTheWatchCache(t *testing.T) {
	seen := map[string]bool{`no resourceVersion "0"`: false, "no UID comes back": false, "no object's resourceVersion goes backwards": false}
	all := func() bool { return !slices.Contains(slices.Collect(maps.Values(seen)), false) }
	for seed := uint64(1); seed <= 300 && !all(); seed++ {
		s := newSchedule(seed)
		s.wrap = func(src Source) Source { return listsAtZero{src} }
		failure, _ := explore(t, s, DefaultBackoff)
		for rule := range seen {
			if !seen[rule] && strings.Contains(failure, rule) {
				seen[rule] = true
				t.Logf("caught at schedule %s: %s", s, failure)
			}
		}
	}
	for rule, ok := range seen {
		if !ok {
			t.Errorf("300 schedules with every list at resourceVersion \"0\", and the explorer never said %q", rule)
		}
	}
}

// The explorer must catch a reader that hears of a cut a frame late: one
// that, when a frame breaks the stream, reads once more before it says so.
func TestExplorerCatchesAReaderThatReadsPastACut(t *testing.T) {
	for seed := uint64(1); seed <= 100; seed++ {
		s := newSchedule(seed)
		s.codec = readsPastABreak{s.codec}
		if failure, _ := explore(t, s, DefaultBackoff); strings.Contains(failure, "a cut frame breaks the stream at the cut") {
			t.Logf("caught at schedule %s: %s", s, failure)
			return
		}
	}
	t.Fatal("100 schedules with a reader that reads past a broken frame, and the explorer saw no frame read past a cut")
}

// readsPastABreak is a codec whose streams, at a broken frame, read once
// more from the body before they return the error.
type readsPastABreak struct{ Codec[*v1alpha1.MyResource] }

func (c readsPastABreak) DecodeEvents(r io.Reader) Events[*v1alpha1.MyResource] {
	return readPast{c.Codec.DecodeEvents(r), r}
}

type readPast struct {
	Events[*v1alpha1.MyResource]
	r io.Reader
}

func (p readPast) Next() (Event[*v1alpha1.MyResource], error) {
	ev, err := p.Events.Next()
	if err != nil && !errors.Is(err, io.EOF) && asSkip(err) == nil {
		p.r.Read(make([]byte, 64<<10))
	}
	return ev, err
}

// listsAtZero asks for resourceVersion "0" on every first page of a list
// (not on probes, whose resourceVersion must be the server's latest).
type listsAtZero struct{ Source }

func (l listsAtZero) List(ctx context.Context, opts metav1.ListOptions) (io.ReadCloser, error) {
	if opts.Continue == "" && opts.Limit != 1 {
		opts.ResourceVersion = "0"
	}
	return l.Source.List(ctx, opts)
}

// FuzzExplorer searches more schedules: go test ./watcher -run '^$' -fuzz FuzzExplorer.
func FuzzExplorer(f *testing.F) {
	for seed := range uint64(8) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		s := newSchedule(seed)
		if failure, _ := explore(t, s, DefaultBackoff); failure != "" {
			t.Fatalf("%s\n  broke: %s", s, failure)
		}
	})
}
