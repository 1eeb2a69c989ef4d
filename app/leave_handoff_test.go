package app_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"rawwatch/internal/testkit"
)

// A clean leave hands its slots over before it lets them go (ring.Member.Drain):
// a replica that leaves keeps each slot, and handles its deletions, until
// the member that takes it covers it, was swept against, and has confirmed
// it. So a deletion made at any instant of the leave reaches a reconciler:
// the leaver's, or the new owner's. Here a leaves while objects are deleted
// every 20 ms or so, from its SIGTERM until well after it is gone; every
// deletion must be handled by a or b.
func TestACleanLeaveHandsEveryDeletionOver(t *testing.T) {
	cp, ns, c := testkit.Parallel(t)
	const objects = 600
	testkit.Objects(t, c, ns, "obj", objects)
	ref := &referee{t: t, busy: map[string]string{}, count: map[string]int{}, deleted: map[types.UID]bool{}}
	a := startReplica(t, cp.Config(), ns, "a", ref)
	b := startReplica(t, cp.Config(), ns, "b", ref)
	waitSettled(t, settleLimit, objects, a, b)

	var deleted []types.UID
	del := func(i int) {
		name := fmt.Sprintf("obj-%d", i)
		o, err := c.Get(context.Background(), ns, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(context.Background(), ns, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &o.UID}}); err != nil {
			t.Fatal(err)
		}
		deleted = append(deleted, o.UID)
	}
	a.stop() // SIGTERM
	start, i := time.Now(), 0
	for ; i < objects; i++ {
		select {
		case <-a.stopped:
		default:
			del(i)
			time.Sleep(20 * time.Millisecond)
			continue
		}
		break
	}
	took := time.Since(start)
	for end := i + 20; i < min(end, objects); i++ { // b alone
		del(i)
	}
	t.Logf("a left in %s; %d objects deleted meanwhile and after", took.Round(10*time.Millisecond), len(deleted))
	if i == objects {
		t.Fatalf("a did not leave within %d deletions", objects)
	}
	if n, some := ref.unhandled(nil, &deleted); n > 0 {
		t.Errorf("%d of %d deletions made during and after a's leave reached no reconciler (%v …)", n, len(deleted), some)
	}
}
