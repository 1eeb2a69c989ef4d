package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"

	"rawwatch/api/v1alpha1"
	"rawwatch/internal/testkit"
	"rawwatch/ring"
	"rawwatch/shard"
)

// Three rawwatch processes with --sharding, running as the ServiceAccount
// with config/rbac and config/sharded's Role and nothing more: they divide
// 300 objects and reconcile them; one is killed (SIGKILL: no clean leave,
// its Lease stays behind, unrenewed), and the objects all change: the two
// left reconcile every change, once the dead one's Lease expired, and
// delete the dead one's Lease (ring.CollectWithin). One then stops on
// SIGTERM: it exits 0 and deletes its Lease. No request is refused.
func TestShardedBinariesSurviveAKill(t *testing.T) {
	cp, ns, admin := testkit.Parallel(t)
	ctx := context.Background()
	kubeconfig, _ := asController(t, cp, filepath.Join(root, "config", "sharded", "sharding_role.yaml"))
	const objects = 300
	testkit.Objects(t, admin, ns, "obj", objects)
	ringName := "e2e-" + rand.String(6) // tests share the namespace of the Leases
	const lease, renew = 3 * time.Second, 500 * time.Millisecond
	start := func(id string) *proc {
		return startBinary(t, nil, "--kubeconfig", kubeconfig, "--namespace", ns, "--sharding",
			"--sharding-namespace", testkit.ControllerNamespace, "--sharding-ring", ringName, "--sharding-identity", id,
			"--sharding-lease-duration", lease.String(), "--sharding-renew-period", renew.String(), "-v=1")
	}
	procs := map[string]*proc{"p0": start("p0"), "p1": start("p1"), "p2": start("p2")}
	converged := func(what string, limit time.Duration) time.Duration {
		t.Helper()
		began := time.Now()
		testkit.Eventually(t, limit, func() bool {
			list, err := admin.List(ctx, ns, metav1.ListOptions{})
			if err != nil || len(list.Items) != objects {
				return false
			}
			for _, o := range list.Items {
				if o.Status.Phase != v1alpha1.PhaseProcessed || o.Status.ObservedGeneration != o.Generation {
					return false
				}
			}
			return true
		}, "%s: not every object was reconciled", what)
		return time.Since(began)
	}
	took := converged("three replicas", time.Minute)
	t.Logf("three replicas reconciled %d objects within %s", objects, took.Round(time.Millisecond))
	kube := kubernetes.NewForConfigOrDie(cp.Config())
	claims := func() map[string]shard.SlotSet {
		leases, err := kube.CoordinationV1().Leases(testkit.ControllerNamespace).List(ctx,
			metav1.ListOptions{LabelSelector: ring.Label + "=" + ringName})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]shard.SlotSet{}
		for _, l := range leases.Items {
			s, err := shard.ParseSlotSet(l.Annotations[ring.AnnotationSlots])
			if err != nil {
				t.Errorf("Lease %s: %v", l.Name, err)
			}
			out[*l.Spec.HolderIdentity] = s
		}
		return out
	}
	// The claims on the Leases tile the slots.
	tiled := func(ids ...string) bool {
		c := claims()
		var all shard.SlotSet
		for _, id := range ids {
			if !all.And(c[id]).Empty() {
				return false
			}
			all = all.Union(c[id])
		}
		return all.Len() == shard.Slots
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return tiled("p0", "p1", "p2") }, "the Leases' claims do not tile the slots: %v", claims())

	procs["p1"].cmd.Process.Signal(syscall.SIGKILL)
	<-procs["p1"].done
	killed := time.Now()
	for i := range objects {
		testkit.Touch(t, admin, ns, fmt.Sprintf("obj-%d", i))
	}
	took = converged("after the kill", time.Minute)
	testkit.Eventually(t, 10*time.Second, func() bool { return tiled("p0", "p2") }, "after the kill, p0 and p2 do not claim every slot: %v", claims())
	t.Logf("p1 killed: every object changed and was reconciled %s after the kill (lease %s, renew period %s)",
		time.Since(killed).Round(time.Millisecond), lease, renew)
	// The dead replica's Lease is collected by the live ones, in time.
	testkit.Eventually(t, ring.CollectWithin(lease, renew)+5*time.Second, func() bool { _, ok := claims()["p1"]; return !ok },
		"the killed replica's Lease was not deleted within %s of the kill", ring.CollectWithin(lease, renew))
	t.Logf("the killed replica's Lease was deleted %s after the kill", time.Since(killed).Round(time.Millisecond))

	if code := procs["p0"].stop(t); code != 0 {
		t.Errorf("p0 exited %d on SIGTERM", code)
	}
	if _, err := kube.CoordinationV1().Leases(testkit.ControllerNamespace).Get(ctx, ringName+".p0", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("p0 stopped cleanly but its Lease is still there (%v)", err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return tiled("p2") }, "p2 alone does not claim every slot: %v", claims())
	for id, p := range procs {
		if out := p.output(); strings.Contains(out, "forbidden") {
			t.Errorf("%s needed a permission it lacks:\n%s", id, out)
		}
	}
}
