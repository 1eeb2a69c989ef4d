package ring

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// A renewal that times out may still have been written. Under load one
// attempt times out after the server wrote it, the next times out before
// it could: the Lease holds the first attempt's renewTime. The member must
// know it for its own, not take it for another process's and fence itself
// for good. (Found by make test: a replica whose renewals timed out under
// -race stayed out of the ring for the rest of the test.)
func TestAnOwnEarlierAttemptIsNotAForeignWriter(t *testing.T) {
	client := fake.NewSimpleClientset()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m, err := New(Config{Client: client, Namespace: "ns", Ring: "r", Identity: "a",
		Now: func() time.Time { now = now.Add(time.Second); return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := m.renew(ctx); err != nil {
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
		if err := m.renew(ctx); !errors.Is(err, timeout) {
			t.Fatalf("attempt %d: %v, want the timeout", i+1, err)
		}
	}
	if err := m.renew(ctx); err != nil {
		t.Fatalf("the third attempt, finding the first one's renewTime on the Lease: %v", err)
	}
	if err := m.renew(ctx); err != nil {
		t.Fatalf("after a success: %v", err)
	}
}
