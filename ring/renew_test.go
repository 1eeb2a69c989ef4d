package ring

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
)

// A renewal that times out may still have been written. Under load one
// attempt times out after the server wrote it, the next times out before
// it could: the Lease holds the first attempt's renewTime. The member must
// know it for its own, not take it for another process's and fence itself
// for good. (Found by make test: a replica whose renewals timed out under
// -race stayed out of the ring for the rest of the test.)
func TestAnOwnEarlierAttemptIsNotAForeignWriter(t *testing.T) {
	client := fake.NewSimpleClientset()
	now := epoch
	m, err := New(Config{Client: client, Namespace: "ns", Ring: "r", Identity: "a",
		Now: func() time.Time { now = now.Add(time.Second); return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := renewed(m, ctx); err != nil {
		t.Fatalf("creating the Lease: %v", err)
	}
	timeout := errors.New("context deadline exceeded")
	updates := 0
	client.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		updates++
		switch updates {
		case 1: // written, then the answer is lost
			obj := a.(k8stesting.UpdateAction).GetObject()
			if err := client.Tracker().Update(a.GetResource(), obj, "ns"); err != nil {
				t.Fatal(err)
			}
			return true, nil, timeout
		case 2: // not written
			return true, nil, timeout
		}
		return false, nil, nil
	})
	for i := range 2 {
		if err := renewed(m, ctx); !errors.Is(err, timeout) {
			t.Fatalf("attempt %d: %v, want the timeout", i+1, err)
		}
	}
	if err := renewed(m, ctx); err != nil {
		t.Fatalf("the third attempt, finding the first one's renewTime on the Lease: %v", err)
	}
	if err := renewed(m, ctx); err != nil {
		t.Fatalf("after a success: %v", err)
	}
}

// While the ring's Leases cannot be listed, the others stand as they stood
// at the last list that succeeded: one live then stays live, and one dead
// then stays dead. (A failed list once brought a member killed minutes
// before back into the view, and its share of the slots with it.)
func TestAFailedListRaisesNoDeadMember(t *testing.T) {
	client := versionedClient()
	now := epoch
	clock := func() time.Time { return now }
	member := func(id string) *Member {
		m, err := New(Config{Client: client, Namespace: "ns", Ring: "r", Identity: id, LeaseDuration: 6 * time.Second, RenewPeriod: time.Second, Now: clock})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	a, dead, alive := member("a"), member("dead"), member("alive")
	ctx := context.Background()
	step := func(lookOK bool) []string {
		if err := renewed(a, ctx); err != nil {
			t.Fatal(err)
		}
		err := a.look(ctx)
		if (err == nil) != lookOK {
			t.Fatalf("list: %v, want it to succeed: %v", err, lookOK)
		}
		a.lookOK = lookOK
		a.update(klog.Background())
		return a.Members()
	}
	for _, m := range []*Member{dead, alive} {
		if err := renewed(m, ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := step(true); !slices.Equal(got, []string{"a", "alive", "dead"}) {
		t.Fatalf("members %v, want all three", got)
	}
	for range 7 { // "dead" stops renewing; "alive" goes on
		now = now.Add(time.Second)
		if err := renewed(alive, ctx); err != nil {
			t.Fatal(err)
		}
		step(true)
	}
	if got := a.Members(); !slices.Equal(got, []string{"a", "alive"}) {
		t.Fatalf("members %v after a lease duration of silence, want a and alive", got)
	}
	client.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("the server is down")
	})
	for range 3 {
		now = now.Add(time.Second)
		if got := step(false); !slices.Equal(got, []string{"a", "alive"}) {
			t.Fatalf("members %v while the list fails, want them as they were: a and alive", got)
		}
	}
}

// versionedClient is a fake clientset whose Leases get a new
// resourceVersion at every write, as on a real server (the fake keeps none,
// and a member judges the others live by their resourceVersions moving).
func versionedClient() *fake.Clientset {
	client := fake.NewSimpleClientset()
	rv := 0
	client.PrependReactor("*", "leases", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if w, ok := act.(interface{ GetObject() runtime.Object }); ok {
			rv++
			w.GetObject().(metav1.Object).SetResourceVersion(strconv.Itoa(rv))
		}
		return false, nil, nil
	})
	return client
}

// renewed renews m's Lease as Run does: a success extends its lease.
func renewed(m *Member, ctx context.Context) error {
	sent, err := m.renew(ctx)
	if err == nil {
		m.extend(klog.Background(), sent)
	}
	return err
}
