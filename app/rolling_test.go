package app_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"rawwatch/app"
	"rawwatch/internal/testkit"
)

// A rolling update, as a Deployment with one pod of surge runs it, while
// objects are deleted every 20 ms or so: n1 joins; each old replica gets
// its SIGTERM once the previous new one is up (a second after it
// started), as the next new one starts. Every deletion must reach a
// reconciler, and each leave must end before its drain's budget runs out
// (DrainTimeout less two renew periods: a drain that ran out may let
// deletions go). The drain's budget, 49 s, is ten times what a drain
// takes here, and less than a slot given and never taken waits (its
// HandoffTimeout, four lease durations: 60 s). A leave that runs out while
// a replica fenced itself (the Lease API too slow for its renewals: a
// machine under load) is reported, not failed.
func TestAShardedRollingUpdateHandsEveryDeletionOver(t *testing.T) {
	cp, ns, c := testkit.Parallel(t)
	const objects = 1500
	s := app.Sharding{LeaseDuration: 15 * time.Second, RenewPeriod: 500 * time.Millisecond, DrainTimeout: 50 * time.Second}
	budget := s.DrainTimeout - 2*s.RenewPeriod
	testkit.Objects(t, c, ns, "obj", objects)
	ref := &referee{t: t, busy: map[string]string{}, count: map[string]int{}, deleted: map[types.UID]bool{}}
	start := func(name string) *replica { return startReplicaWith(t, cp.Config(), ns, name, ref, s) }
	old := []*replica{start("a"), start("b"), start("c")}
	waitSettled(t, settleLimit, objects, old...)

	var (
		mu      sync.Mutex
		deleted []types.UID
	)
	done := make(chan struct{})
	churned := make(chan struct{})
	go func() {
		defer close(churned)
		for i := 0; i < objects; i++ {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			name := fmt.Sprintf("obj-%d", i)
			o, err := c.Get(context.Background(), ns, name)
			if err == nil {
				err = c.Delete(context.Background(), ns, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &o.UID}})
			}
			if err != nil {
				t.Errorf("deleting %s: %v", name, err)
				return
			}
			mu.Lock()
			deleted = append(deleted, o.UID)
			mu.Unlock()
		}
	}()
	joined := []*replica{start("n1")}
	for i, r := range old {
		time.Sleep(time.Second) // the last new replica is up
		r.stop()                // SIGTERM
		began := time.Now()
		if i < 2 {
			joined = append(joined, start(fmt.Sprintf("n%d", i+2)))
		}
		<-r.stopped
		took := time.Since(began)
		t.Logf("%s left in %s", r.name, took.Round(10*time.Millisecond))
		if took >= budget {
			ref.mu.Lock()
			fences := ref.fences
			ref.mu.Unlock()
			if fences > 0 {
				t.Logf("%s's drain ran out of time (%s), the ring's requests too slow: %d fences", r.name, budget, fences)
			} else {
				t.Errorf("%s left %s after its SIGTERM: its drain ran out of time (%s), no replica fenced", r.name, took.Round(10*time.Millisecond), budget)
			}
		}
	}
	close(done)
	<-churned
	mu.Lock()
	total := len(deleted)
	mu.Unlock()
	t.Logf("%d objects deleted during the update", total)
	if n, some := ref.unhandled(&mu, &deleted); n > 0 {
		t.Errorf("%d of %d deletions made during the rolling update reached no reconciler (%v …)", n, total, some)
	}
	waitSettled(t, settleLimit, objects-total, joined...)
}
