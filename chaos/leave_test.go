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

// Claim (docs/sharding.md, "A clean leave drains", step 4: "the Lease is
// deleted (one request, bounded by a renew period)", and "step 4 takes at
// most a renew period more"; test/e2e's manifests_test sizes the grace
// period with the ring's release as one renew period; leaseBound counts "the
// DELETE of a clean leave", one request).
//
// ring.Member.leave now marks the Lease leaving (a GET and an UPDATE, bounded
// together by a renew period), waits a renew period, then deletes it (a
// renew period more): three requests, up to three renew periods — 6 s at the
// default 2 s, not 2 s. (The grace period of 45 s still covers 30 s of drain
// and 6 s, so nothing is cut today; the stated bound and count are wrong.)
// Here, with a 1 s renew period, the UPDATE that marks the Lease takes
// 400 ms and the DELETE 400 ms (well within their timeouts).
//
// Failed with (the claim was wrong, not the ring: the doc, leaseBound and
// the manifest test now count three requests and three renew periods):
//
//	the leave made 3 requests on Leases (get 1, update 1, delete 1; the bound counts 1) and took 1.8s, over one renew period (1s)
//
// It now holds the leave to the true bound: at most three requests, and
// three renew periods (here 0.4 s + 1 s + 0.4 s; the fake client ignores
// the requests' timeouts, so a load's delay is allowed a renew period more).
func TestAdversaryACleanLeaveIsThreeRequestsAndThreeRenewPeriods(t *testing.T) {
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
