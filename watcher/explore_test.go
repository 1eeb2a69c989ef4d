package watcher

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"k8s.io/klog/v2"

	"rawwatch/api/v1alpha1"
	"rawwatch/internal/fakeapi"
	"rawwatch/store"
)

// The fault-schedule explorer. Each schedule, drawn from a seed, runs the
// real loop (Watcher.Run) against package fakeapi's server in virtual time
// while the server's objects churn and faults come and go: every persistent
// fault of fakeapi.Modes, and one-off cuts, compactions (410s) and restores
// of an older copy of the data, the way etcd documents for Kubernetes. Then the faults stop, and
// every schedule must hold these rules:
//
//   - request budget: in every minute of the run, at most budgetPerMinute
//     requests (WATCH, WatchList, first LIST pages; continue pages go with
//     their list), a bound that follows from the backoff (see budget);
//   - liveness: within livenessBound of the faults stopping, the store
//     equals the server's objects (same keys, UIDs, resourceVersions);
//   - safety: the handler's deltas, followed per UID, are a valid life —
//     Added, then Updated while present, then Deleted — and every object
//     gone from the server at the end had its Deleted delta, with its UID;
//   - no goroutine outlives the loop (synctest fails the test otherwise).
//
// A failing schedule prints its seed; -explore.seed=N replays it alone.

var (
	exploreN    = flag.Int("explore.n", 0, "schedules the explorer runs (0: 10,000, or 3,000 with -race)")
	exploreSeed = flag.Uint64("explore.seed", 0, "run only this schedule")
)

// budget is the most requests any 60 s window may hold under faults, from
// the backoff b: a window holds at most one backoff reset (a reset needs
// b.ResetAfter ≥ 60 s of calm), so its waits are at least the minimal
// delays (1-Jitter)·Initial·Factorⁿ from n = 0; the requests between two
// waits are at most five (a WATCH that meets a 410, a WatchList that fails,
// the LIST instead, that LIST's immediate restart after an expired continue
// token, the next WATCH).
func budget(b Backoff) int {
	waits, sum := 0, time.Duration(0)
	for n := 0; ; n++ {
		sum += b.Delay(n, 0.9999999)
		if sum > time.Minute {
			break
		}
		waits++
	}
	return 5 * (waits + 1)
}

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
	cut, compact, restore bool
}

type schedule struct {
	seed      uint64
	objects   int
	pageSize  int64
	watchList bool
	timeout   time.Duration
	latency   time.Duration
	phases    []phase
	end       time.Duration // faults stop; churn stops
}

func newSchedule(seed uint64) schedule {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	s := schedule{seed: seed, objects: r.IntN(12), pageSize: int64(1 + r.IntN(5)), watchList: r.IntN(3) == 0,
		timeout: time.Duration(1+r.IntN(5)) * time.Minute, latency: time.Duration(1+r.IntN(50)) * time.Millisecond}
	modes := fakeapi.Modes()
	at := time.Duration(r.IntN(20)) * time.Second
	for range 1 + r.IntN(6) {
		p := phase{at: at, fault: modes[r.IntN(len(modes))],
			cut: r.IntN(3) == 0, compact: r.IntN(3) == 0, restore: r.IntN(8) == 0}
		s.phases = append(s.phases, p)
		at += time.Duration(5+r.IntN(180)) * time.Second
	}
	s.end = at
	return s
}

func (s schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d objects, page size %d, watch-list %v, watch timeout %v, latency %v;", s.seed, s.objects, s.pageSize, s.watchList, s.timeout, s.latency)
	for _, p := range s.phases {
		fmt.Fprintf(&b, " at %v %s", p.at, p.fault)
		for _, x := range []struct {
			on   bool
			name string
		}{{p.cut, "cut"}, {p.compact, "compact"}, {p.restore, "restore"}} {
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
		names := make([]string, 16)
		for i := range names {
			names[i] = fmt.Sprintf("obj-%d", i)
		}
		for i := range s.objects {
			srv.Put("ns", names[i], "v0")
		}
		var deltas []store.Delta[*v1alpha1.MyResource]
		opts := Options[*v1alpha1.MyResource]{
			PageSize: s.pageSize, WatchList: s.watchList, Backoff: b, SilenceLimit: DefaultSilenceLimit,
			WatchTimeoutMin: s.timeout, WatchTimeoutMax: 2 * s.timeout,
			Rand:    rand.New(rand.NewPCG(s.seed, 0xbac0ff)).Float64,
			Codec:   Codec[*v1alpha1.MyResource]{GVK: v1alpha1.GroupVersionKind},
			Handler: func(d store.Delta[*v1alpha1.MyResource]) { deltas = append(deltas, d) },
		}
		st := store.New[*v1alpha1.MyResource]()
		w := New(srv, st, opts)
		ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), exploreLogger()))
		done := make(chan struct{})
		go func() { w.Run(ctx); close(done) }()
		start := time.Now()

		// Faults and churn until s.end.
		saved := srv.Save()
		next := 0
		for time.Since(start) < s.end {
			for next < len(s.phases) && time.Since(start) >= s.phases[next].at {
				p := s.phases[next]
				srv.SetFault(p.fault)
				if p.restore {
					// etcd's documented restore (the revision bumped, history
					// compacted): a restore that lets the resourceVersion go
					// back is caught only if the watcher reconnects before new
					// writes pass the version it had (TestTimeTravel...).
					srv.Restore(saved, 1000)
				}
				if p.compact {
					srv.Compact()
				}
				if p.cut {
					srv.Cut()
				}
				saved = srv.Save()
				next++
			}
			name := names[r.IntN(len(names))]
			switch r.IntN(4) {
			case 0:
				srv.Delete("ns", name)
			default:
				srv.Put("ns", name, fmt.Sprintf("v%d", r.IntN(1000)))
			}
			time.Sleep(time.Duration(500+r.IntN(4500)) * time.Millisecond)
		}
		srv.SetFault(fakeapi.Healthy)
		healed := time.Now()

		// Liveness: the store converges within the bound.
		limit := livenessBound(opts)
		for !storeEqualsServer(st, srv) && time.Since(healed) <= limit {
			time.Sleep(time.Second)
		}
		converged = time.Since(healed)
		if !storeEqualsServer(st, srv) {
			fail("liveness: the store still differs from the server %v after the faults stopped (bound %v)", converged, limit)
		}
		cancel()
		<-done

		// Budget: every 60 s window of the run.
		reqs := srv.Requests()
		max := budget(DefaultBackoff)
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

// exploreLogger discards the loop's log, unless -explore.seed replays one
// schedule with -v: then it is printed.
func exploreLogger() logr.Logger {
	if *exploreSeed != 0 && testing.Verbose() {
		return funcr.New(func(prefix, args string) { fmt.Println(time.Now().Format("15:04:05.000"), prefix, args) }, funcr.Options{Verbosity: 4})
	}
	return funcr.New(func(string, string) {}, funcr.Options{})
}

func storeEqualsServer(st *store.Store[*v1alpha1.MyResource], srv *fakeapi.Server) bool {
	objs := srv.Objects()
	if st.Len() != len(objs) {
		return false
	}
	for key, o := range objs {
		got, ok := st.Get(key)
		if !ok || got.UID != o.UID || got.ResourceVersion != o.ResourceVersion {
			return false
		}
	}
	return true
}

func checkLives(deltas []store.Delta[*v1alpha1.MyResource], srv *fakeapi.Server, fail func(string, ...any)) {
	present := map[string]bool{}
	for i, d := range deltas {
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
		len(seeds), time.Since(start).Round(time.Millisecond), failed, budget(DefaultBackoff), longest)
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
