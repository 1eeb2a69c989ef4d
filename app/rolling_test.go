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
// started), as the next new one starts. Each leave must end before its
// drain's budget runs out (DrainTimeout less two renew periods: a drain
// that ran out may let deletions go), and every deletion must reach a
// reconciler. The lease is the default, so that a slot whose handoff waits
// for its HandoffTimeout (four lease durations) outlasts that budget.
func TestAShardedRollingUpdateHandsEveryDeletionOver(t *testing.T) {
	cp, ns, c := testkit.Parallel(t)
	const (
		objects = 1500
		lease   = 15 * time.Second
		renew   = 500 * time.Millisecond
		budget  = app.DefaultDrainTimeout - 2*renew
	)
	testkit.Objects(t, c, ns, "obj", objects)
	ref := &referee{t: t, busy: map[string]string{}, count: map[string]int{}, deleted: map[types.UID]bool{}}
	start := func(name string) *replica { return startReplicaOn(t, cp.Config(), ns, name, ref, lease, renew) }
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
			t.Errorf("%s left %s after its SIGTERM: its drain ran out of time (%s)", r.name, took.Round(10*time.Millisecond), budget)
		}
	}
	close(done)
	<-churned
	lost := func() (n int, some []types.UID) {
		mu.Lock()
		defer mu.Unlock()
		ref.mu.Lock()
		defer ref.mu.Unlock()
		for _, uid := range deleted {
			if !ref.deleted[uid] {
				n++
				if len(some) < 5 {
					some = append(some, uid)
				}
			}
		}
		return n, some
	}
	deadline := time.Now().Add(time.Minute)
	for n, _ := lost(); n > 0 && time.Now().Before(deadline); n, _ = lost() {
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	total := len(deleted)
	mu.Unlock()
	t.Logf("%d objects deleted during the update", total)
	if n, some := lost(); n > 0 {
		t.Errorf("%d of %d deletions made during the rolling update reached no reconciler (%v …)", n, total, some)
	}
	waitSettled(t, settleLimit, objects-total, joined...)
}
