package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/internal/testkit"
)

// leaseBound is how long a standby may wait for the leader's Lease: the
// lease duration (15 s) and one retry period (2 s), the controller's
// defaults. A leader that shuts down cleanly releases it at once.
const leaseBound = 17 * time.Second

// leader is the pod holding the leader Lease, and its identity ("" if none).
func leader(t *testing.T) (pod, identity string) {
	t.Helper()
	l, err := kube.CoordinationV1().Leases(systemNS).Get(context.Background(), "rawwatch", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return "", ""
	}
	id := *l.Spec.HolderIdentity
	pod, _, _ = strings.Cut(id, "_")
	return pod, id
}

// kubectl delete pod of the leader: the pod gets SIGTERM, finishes its
// reconciles, releases the Lease, and the other replica takes over within
// the lease's bound; the objects created meanwhile are reconciled, and no
// object's generation is written twice (the new leader's first pass finds
// every status the old one wrote up to date).
func TestDeletingTheLeaderHandsOverWithinTheLease(t *testing.T) {
	needNode(t)
	deploy(t, "config/default", tagA)
	ns, writes := processedObjects(t, 200)

	var old, oldID string
	waitUntil(t, time.Minute, func() (bool, string) {
		old, oldID = leader(t)
		return old != "", "no leader"
	})
	start := time.Now()
	kubectl(t, "-n", systemNS, "delete", "pod", old, "--wait=false")
	// Objects created while the leadership moves: someone must reconcile them.
	go func() { _ = testkit.CreateMany(context.Background(), mr, ns, "during", 100) }()
	var newPod, newID string
	waitUntil(t, 2*leaseBound, func() (bool, string) {
		newPod, newID = leader(t)
		return newID != "" && newID != oldID, fmt.Sprintf("the Lease is still held by %q", newID)
	})
	took := time.Since(start)
	if newPod == old {
		t.Fatalf("the deleted pod %s leads again (%s)", old, newID)
	}
	waitProcessed(t, ns, 300, 2*time.Minute)
	waitRolledOut(t, 2*time.Minute)
	twice, gens := writes.twice(t)
	t.Logf("leader failover: %s deleted, %s leads after %s (bound %s); %d object generations written, %d written twice",
		old, newPod, took.Round(10*time.Millisecond), leaseBound, gens, len(twice))
	if took > leaseBound {
		t.Errorf("the new leader took %s, more than the lease's bound %s", took, leaseBound)
	}
	if len(twice) > 0 {
		t.Errorf("objects reconciled twice: %v", twice)
	}
	if log := podLog(t, newPod); !strings.Contains(log, "Became the leader") {
		t.Errorf("the new leader %s never says it became the leader:\n%s", newPod, log)
	}
}
