package app_test

import (
	"context"
	"errors"
	"fmt"
	"k8s.io/apimachinery/pkg/types"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"rawwatch/app"
	"rawwatch/client"
	"rawwatch/faultproxy"
	"rawwatch/internal/testkit"
	"rawwatch/leader"
	"rawwatch/reconcile"
	"rawwatch/store"
)

// referee wraps the reconcilers of several replicas: it notices a key in two
// of them at once, and counts each replica's reconciles.
type referee struct {
	t     *testing.T
	mu    sync.Mutex
	busy  map[string]string // key → replica reconciling it
	count map[string]int    // replica → reconciles
	// by: key → replica → reconciles; deletions: Deleted calls (the
	// sharded tests use them).
	by        map[string]map[string]int
	deletions int
	// losses: the times a replica lost slots it worked, fences of them
	// (the sharded tests count them: watchLosses).
	losses, fences int
	// deleted: the UIDs whose deletion a replica handled, when not nil.
	deleted map[types.UID]bool
}

// unhandled waits up to a minute for every deletion of deleted (read
// under mu, if not nil) to reach a reconciler, and returns how many did not
// and up to five of them.
func (r *referee) unhandled(mu *sync.Mutex, deleted *[]types.UID) (n int, some []types.UID) {
	count := func() (n int, some []types.UID) {
		if mu != nil {
			mu.Lock()
			defer mu.Unlock()
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, uid := range *deleted {
			if !r.deleted[uid] {
				n++
				if len(some) < 5 {
					some = append(some, uid)
				}
			}
		}
		return n, some
	}
	deadline := time.Now().Add(time.Minute)
	for n, _ := count(); n > 0 && time.Now().Before(deadline); n, _ = count() {
		time.Sleep(100 * time.Millisecond)
	}
	return count()
}

type refereed struct {
	r       *referee
	replica string
	inner   reconcile.Reconciler[object]
}

func (r *referee) wrap(replica string) func(reconcile.Reconciler[object]) reconcile.Reconciler[object] {
	return func(inner reconcile.Reconciler[object]) reconcile.Reconciler[object] {
		return &refereed{r: r, replica: replica, inner: inner}
	}
}

func (w *refereed) enter(key string) {
	w.r.mu.Lock()
	defer w.r.mu.Unlock()
	if other, ok := w.r.busy[key]; ok {
		w.r.t.Errorf("key %s reconciled by %s while %s was reconciling it", key, w.replica, other)
	}
	w.r.busy[key] = w.replica
	w.r.count[w.replica]++
	if w.r.by != nil {
		if w.r.by[key] == nil {
			w.r.by[key] = map[string]int{}
		}
		w.r.by[key][w.replica]++
	}
}

func (w *refereed) leave(key string) {
	w.r.mu.Lock()
	defer w.r.mu.Unlock()
	delete(w.r.busy, key)
}

func (w *refereed) Reconcile(ctx context.Context, key string) error {
	w.enter(key)
	defer w.leave(key)
	// Reconciles take a while, so that one is in flight when the Lease goes.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(50 * time.Millisecond):
	}
	return w.inner.Reconcile(ctx, key)
}

func (w *refereed) Deleted(ctx context.Context, d store.Delta[object]) error {
	w.r.mu.Lock()
	w.r.deletions++
	w.r.mu.Unlock()
	w.enter(d.Key)
	defer w.leave(d.Key)
	err := w.inner.Deleted(ctx, d)
	if w.r.mu.Lock(); err == nil && w.r.deleted != nil {
		w.r.deleted[d.Object.UID] = true
	}
	w.r.mu.Unlock()
	return err
}

// churn updates random objects of obj-0 … obj-(objects-1), one every pause,
// until stop is called (it returns once the churn has stopped); every update
// is a generation that must be reconciled in the end. (A conflict with a
// status write is the churn's to retry.)
func churn(t *testing.T, c *client.Client, ns string, objects int, pause time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				o, err := c.Get(ctx, ns, fmt.Sprintf("obj-%d", rand.IntN(objects)))
				if err == nil {
					o.Spec.Message = "changed at " + time.Now().Format(time.RFC3339Nano)
					_, err = c.Update(ctx, o)
				}
				return err
			})
			if err != nil && ctx.Err() == nil {
				t.Errorf("churn: %v", err)
				return
			}
			time.Sleep(pause)
		}
	})
	return func() { cancel(); wg.Wait() }
}

// On the real apiserver: two replicas with leader election,
// the leader reaching the server through the fault proxy, the objects
// changing all the time. The proxy starts answering every write of the
// leader with 500 (its Lease renewals among them) for longer than the renew
// deadline: the leader aborts its reconciles, stops and does not release
// the Lease; the standby takes over once it expires. At no instant do two
// replicas reconcile one key, and every change is reconciled in the end.
func TestRenewalFailuresNeverLetTwoReplicasReconcileOneKey(t *testing.T) {
	cp, ns, c := testkit.Parallel(t)
	const objects = 30
	testkit.Objects(t, c, ns, "obj", objects)
	proxy, viaProxy := testkit.Proxy(t, cp, cp.APIServer)
	ref := &referee{t: t, busy: map[string]string{}, count: map[string]int{}}
	lease := leader.Config{Namespace: ns, Name: "rawwatch", LeaseDuration: 3 * time.Second,
		RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond}
	run := func(replica string, cfg *rest.Config) (*app.App, <-chan error) {
		l := lease
		l.Identity = replica
		a, err := app.New(app.Options{Config: cfg, Namespace: ns, Workers: 4, LeaderElection: &l,
			WrapReconciler: ref.wrap(replica)})
		if err != nil {
			t.Fatal(err)
		}
		logs := &testkit.Logs{}
		ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logs.Logger(2)))
		done, stopped := make(chan error, 1), make(chan struct{})
		go func() { done <- a.Run(ctx); close(stopped) }()
		testkit.StopAtEnd(t, cancel, stopped, time.Minute, "replica %s did not stop", replica)
		return a, done
	}
	a, aDone := run("a", viaProxy)
	testkit.Eventually(t, 20*time.Second, a.Elector.IsLeader, "a never led")
	b, _ := run("b", cp.Config())
	waitConverged(t, c, ns, objects)

	// Changes all the time, from before the failures until after b took over.
	stopChurn := churn(t, c, ns, objects, 20*time.Millisecond)
	time.Sleep(time.Second)
	failed := time.Now()
	proxy.Fail(faultproxy.Failure{Kinds: faultproxy.Other, Code: http.StatusInternalServerError})
	select {
	case err := <-aDone:
		if !errors.Is(err, leader.ErrLost) {
			t.Fatalf("a's Run = %v, want leader.ErrLost", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a did not stop after its renewals failed")
	}
	aStopped := time.Since(failed)
	testkit.Eventually(t, 20*time.Second, b.Elector.IsLeader, "b never took over")
	bLeads := time.Since(failed)
	time.Sleep(time.Second)
	stopChurn()
	waitConverged(t, c, ns, objects)
	ref.mu.Lock()
	defer ref.mu.Unlock()
	t.Logf("renewals failing from 0 s: a stopped at %v, b led at %v; reconciles: a %d, b %d",
		aStopped.Round(time.Millisecond), bLeads.Round(time.Millisecond), ref.count["a"], ref.count["b"])
	if ref.count["b"] == 0 {
		t.Error("b never reconciled")
	}
}
