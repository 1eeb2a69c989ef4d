package sharding_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"rawwatch/internal/fakeapi"
	"rawwatch/internal/testkit"
	"rawwatch/shard"
	"rawwatch/sharding"
	"rawwatch/store"
	"rawwatch/watcher"
)

// The bound on resharding (SetShard), in virtual time: a ring that changes
// this replica's shard every second for a minute (a flapping membership) costs
// a healthy server at most one LIST and one WATCH per change — a reshard is
// never amplified — and a failing server no more than the backoff's budget:
// a reshard does not cut a backoff short, so the waits still space the
// requests.
func TestReshardsCostAtMostOneListEach(t *testing.T) {
	for _, fault := range []fakeapi.Mode{fakeapi.Healthy, fakeapi.Fail500, fakeapi.Refuse} {
		t.Run(fault.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := fakeapi.New()
				for _, name := range []string{"a", "b", "c", "d", "e", "f"} {
					srv.Put("ns", name, "v0")
				}
				w := sharding.NewWatcher(srv, store.New[object](), watcher.Options[object]{Codec: codec}, nil)
				ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
				done := make(chan struct{})
				go func() { w.Run(ctx); close(done) }()
				<-w.Synced()
				srv.SetFault(fault)
				before := len(srv.Requests())
				const changes = 60
				for i := range changes {
					w.SetShard(shard.Of([]int{i % shard.Slots, (i + 100) % shard.Slots}))
					time.Sleep(time.Second)
				}
				lists, watches := 0, 0
				for _, r := range srv.Requests()[before:] {
					switch r.Kind {
					case "LIST":
						if !r.Continue {
							lists++
						}
					case "WATCH", "WATCHLIST":
						watches++
					}
				}
				bound := changes // healthy: one LIST and one WATCH per change
				if fault != fakeapi.Healthy {
					bound = testkit.RequestBudget(watcher.DefaultBackoff.Delay)
				}
				t.Logf("%d shard changes in a minute, the server %s: %d LISTs, %d WATCHes (bound %d each, healthy; %d together, failing)",
					changes, fault, lists, watches, changes, testkit.RequestBudget(watcher.DefaultBackoff.Delay))
				switch {
				case fault == fakeapi.Healthy && (lists > bound || watches > bound+1):
					t.Errorf("%d LISTs and %d WATCHes for %d shard changes: more than one each", lists, watches, changes)
				case fault != fakeapi.Healthy && lists+watches > bound:
					t.Errorf("%d LISTs and WATCHes in a minute of shard changes against a failing server, budget %d", lists+watches, bound)
				}
				cancel()
				<-done
			})
		})
	}
}
