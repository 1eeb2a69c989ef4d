package watcher_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/internal/controlplane"
	"rawwatch/internal/testkit"
	"rawwatch/store"
	"rawwatch/watcher"
)

// Time travel on a real control plane of its own (etcd is stopped and
// restored under it): an etcd snapshot, then changes the watcher sees, then
// a restore from the snapshot without etcdutl's --bump-revision and a
// restart of the apiserver. The resourceVersion the watcher had is now in
// the future. Its WATCH cannot open while the apiserver restarts, so the
// first request that gets through is a probe of the server's
// resourceVersion: behind ours, so the watcher relists, and its store ends
// equal to the restored state — the object born after the snapshot reported
// Deleted with its UID, the one deleted after the snapshot back. (Had the
// WATCH been accepted from the "future", the watchdog's silence limit would
// have led to the same probe; the fake API server's tests cover that path.)
func TestTimeTravelAfterAnEtcdRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a control plane of its own")
	}
	t.Parallel()
	ctx := context.Background()
	cp, err := controlplane.Start(ctx, controlplane.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	ns := testkit.Namespace(t, cp.Config())
	c := testkit.Client(t, cp.Config())
	for _, name := range []string{"a", "b"} {
		testkit.Create(t, c, ns, name, "before")
	}
	// Should the restored apiserver accept a WATCH from the "future" and
	// send nothing, the watchdog's silence limit recovers; 10 s keeps that
	// short (the default is 150 s).
	r := start(t, cp.Config(), ns, watcher.Options[object]{SilenceLimit: 10 * time.Second})
	snapshot, err := cp.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := r.w.ResourceVersion()

	born := testkit.Create(t, c, ns, "c", "born after the snapshot")
	a, err := c.Get(ctx, ns, "a")
	if err != nil {
		t.Fatal(err)
	}
	// Many changes: the restarted apiserver writes a few objects of its own
	// (leases, endpoints) as it starts, moving the restored revision on. If
	// it passed ours before the watcher reconnects, nothing could tell the
	// server's history went back (see the package doc); a long lead keeps
	// the test about the case a client can detect.
	for i := range 100 {
		a.Spec.Message = fmt.Sprintf("change %d after the snapshot", i)
		if a, err = c.Update(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Delete(ctx, ns, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, func() bool { _, ok := r.store.Get(ns + "/b"); return !ok && r.store.Len() == 2 },
		"the watcher did not see the changes after the snapshot")
	future := r.w.ResourceVersion()

	restored := time.Now()
	if err := cp.Restore(ctx, snapshot); err != nil {
		t.Fatal(err)
	}
	// The restored server: a and b as they were, no c.
	testkit.Eventually(t, 60*time.Second, func() bool {
		list, err := c.List(ctx, ns, metav1.ListOptions{})
		if err != nil || len(list.Items) != r.store.Len() {
			return false
		}
		for _, o := range list.Items {
			got, ok := r.store.Get(ns + "/" + o.Name)
			if !ok || got.UID != o.UID || got.ResourceVersion != o.ResourceVersion {
				return false
			}
		}
		return true
	}, "the store did not converge to the restored state")
	t.Logf("resourceVersion %s at the snapshot, %s before the restore, %s after; converged %s after the restore began",
		before, future, r.w.ResourceVersion(), time.Since(restored).Round(time.Millisecond))
	if d, ok := r.rec.Find(ns+"/c", store.Deleted); !ok || d.Object.UID != born.UID {
		t.Errorf("no Deleted delta for c with its UID %s (got %+v, %v)", born.UID, d, ok)
	}
	if st := r.stats.Counts(); st.Probes == 0 || st.Relists == 0 {
		t.Errorf("%d probes, %d relists: the restore was not detected by a probe", st.Probes, st.Relists)
	}
	if _, ok := r.store.Get(ns + "/b"); !ok {
		t.Error("b, deleted after the snapshot, is not back")
	}
}
