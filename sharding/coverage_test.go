package sharding_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"rawwatch/internal/fakeapi"
	"rawwatch/sharding"
	"rawwatch/store"
	"rawwatch/watcher"
)

// Coverage is one position, read in one step: a relist never shows its new
// resourceVersion (synced-to) beside the covers-since of the list before it.
// Such a pair says the store has followed the slots without a gap since the
// old list, up to the new one: a replica handing it a slot would take "handed"
// where the truth is "stale" (package ring's HandedOver), and the new owner's
// relist gap would be lost again.
//
// Every WATCH here is answered 410, so the watcher does nothing but relist,
// and a writer changes the objects all the while: every relist has deltas,
// and where the store stands is always a list's resourceVersion. So since
// must equal at, whenever it is read — by the handler, between the relist's
// deltas (at once, deterministically), and by readers on other goroutines
// (run with -race).
func TestCoverageIsNeverReadTornByARelist(t *testing.T) {
	srv := fakeapi.New()
	for i := range 20 {
		srv.Put("ns", fmt.Sprintf("o%d", i), "v0")
	}
	srv.SetFault(fakeapi.WatchGone)
	var (
		w         *sharding.Watcher[object]
		mu        sync.Mutex
		torn      []string
		tornAt    = map[string]int{}
		reads     atomic.Int64
		inHandler atomic.Int64
	)
	check := func(where string) {
		_, since, at := w.Coverage()
		reads.Add(1)
		if since != at {
			mu.Lock()
			if tornAt[where]++; tornAt[where] <= 3 {
				torn = append(torn, fmt.Sprintf("%s: covers since %q, synced to %q", where, since, at))
			}
			mu.Unlock()
		}
	}
	tiny := watcher.Backoff{Initial: time.Microsecond, Max: 2 * time.Microsecond, Factor: 2, ResetAfter: time.Hour}
	w = sharding.NewWatcher(srv, store.New[object](), watcher.Options[object]{
		Codec: codec, Backoff: tiny,
		Handler: func(store.Delta[object]) {
			inHandler.Add(1)
			check("in the handler, between a relist's deltas")
			time.Sleep(20 * time.Microsecond) // the handler's work: the window a reader may fall in
		},
	}, nil)
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
	defer cancel()
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	<-w.Synced()

	var workers sync.WaitGroup
	stop := make(chan struct{})
	workers.Go(func() { // the writer: every relist finds something changed
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			srv.Put("ns", fmt.Sprintf("o%d", i%20), fmt.Sprintf("v%d", i))
			if i%3 == 0 {
				srv.Delete("ns", fmt.Sprintf("o%d", (i+7)%20))
			}
			time.Sleep(50 * time.Microsecond)
		}
	})
	for range 2 { // the readers: a ring's goroutine, publishing the cover
		workers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				check("on another goroutine")
			}
		})
	}
	const relists = 100
	// Synced: the first list is in; the lists after it are relists.
	relisted := func() uint64 { return w.Position().Lists - 1 }
	deadline := time.Now().Add(time.Minute) // a busy machine relists slowly; the count is what matters
	for relisted() < relists && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	workers.Wait()
	cancel()
	<-done
	if n := relisted(); n < 10 || inHandler.Load() < 10 {
		t.Fatalf("%d relists, %d deltas handed in a minute: the test did not test what it claims", n, inHandler.Load())
	}
	t.Logf("%d relists, %d deltas handed, %d reads of the coverage", relisted(), inHandler.Load(), reads.Load())
	if len(torn) > 0 {
		t.Errorf("the coverage was read torn (a list's synced-to beside the covers-since of the list before it) %v:\n%s", tornAt, strings.Join(torn, "\n"))
	}
}
