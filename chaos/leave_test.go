package chaos

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"rawwatch/ring"
)

// A clean leave (ring.Member marks its Lease leaving, a GET and an UPDATE,
// waits a renew period, then deletes it) makes at most three requests on
// Leases, no more than leaseBound counts for it (leaveRequests), and takes
// about three renew periods (docs/sharding.md, "A clean leave drains").
// Here, with a 1 s renew period, the UPDATE and the DELETE take 400 ms
// each; how long the leave took is reported, not failed.
func TestACleanLeaveMakesAtMostThreeRequestsOnLeases(t *testing.T) {
	const renew = time.Second
	client := fake.NewSimpleClientset()
	var leaving atomic.Bool // set just before Run's context ends
	var mu sync.Mutex
	leave := map[string]int{}
	slow := func(verb string) k8stesting.ReactionFunc {
		return func(a k8stesting.Action) (bool, runtime.Object, error) {
			// The API server stores a MicroTime to the microsecond; the
			// fake tracker keeps nanoseconds.
			if w, ok := a.(interface{ GetObject() runtime.Object }); ok {
				if l, ok := w.GetObject().(*coordinationv1.Lease); ok && l.Spec.RenewTime != nil {
					l.Spec.RenewTime = &metav1.MicroTime{Time: l.Spec.RenewTime.Truncate(time.Microsecond)}
				}
			}
			if leaving.Load() {
				mu.Lock()
				leave[verb]++
				mu.Unlock()
				if verb != "get" {
					time.Sleep(400 * time.Millisecond)
				}
			}
			return false, nil, nil
		}
	}
	for _, verb := range []string{"get", "update", "delete", "create", "list"} {
		client.PrependReactor(verb, "leases", slow(verb))
	}
	m, err := ring.New(ring.Config{Client: client, Namespace: "ns", Ring: "r", Identity: "m",
		LeaseDuration: 3 * renew, RenewPeriod: renew})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	for { // its first round created the Lease and listed it
		if l, err := client.CoordinationV1().Leases("ns").Get(context.Background(), "r.m", metav1.GetOptions{}); err == nil && l != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Between two rounds (the next tick is up to 1 s away): stop it.
	time.Sleep(100 * time.Millisecond)
	leaving.Store(true)
	start := time.Now()
	cancel()
	<-done
	took := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	n := leave["get"] + leave["update"] + leave["delete"]
	if n > 3 {
		t.Errorf("the leave made %d requests on Leases (get %d, update %d, delete %d; the bound counts 3)",
			n, leave["get"], leave["update"], leave["delete"])
	}
	// How long it took is a measurement (the fake client ignores the
	// requests' timeouts, which bound it on a real server): a busy machine
	// stretches it, so it is reported, not failed.
	if took > 4*renew {
		t.Logf("the leave took %v, over three renew periods (%v) and a renew period of slack (a busy machine?)", took.Round(100*time.Millisecond), 3*renew)
	}
	// leaseBound counts a leave's requests beyond its rounds: these three,
	// and the lists of one that waits for the slots it gave.
	if n > leaveRequests {
		t.Errorf("leaseBound counts %d requests for a clean leave; it made %d", leaveRequests, n)
	}
}
