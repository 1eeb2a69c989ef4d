package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"rawwatch/api/v1alpha1"
	"rawwatch/observe"
	"rawwatch/queue"
	"rawwatch/reconcile"
	"rawwatch/ring"
	"rawwatch/shard"
	"rawwatch/sharding"
	"rawwatch/store"
	"rawwatch/watcher"
)

// listSource answers every LIST with the objects named in it (one page).
type listSource struct{ names []string }

func (s listSource) List(context.Context, metav1.ListOptions) (io.ReadCloser, error) {
	var items []string
	for _, n := range s.names {
		items = append(items, fmt.Sprintf(`{"apiVersion":"example.com/v1alpha1","kind":"MyResource","metadata":{"name":%q,"namespace":"ns","uid":%q,"resourceVersion":"5"}}`, n, "uid-"+n))
	}
	return io.NopCloser(strings.NewReader(`{"kind":"MyResourceList","apiVersion":"example.com/v1alpha1","metadata":{"resourceVersion":"9"},"items":[` +
		strings.Join(items, ",") + `]}`)), nil
}

func (listSource) Watch(context.Context, metav1.ListOptions) (io.ReadCloser, error) {
	return nil, errors.New("not watched here")
}

// deleter records the deletions it handles and fails those of fail.
type deleter struct {
	reconcile.Reconciler[Object]
	fail types.UID

	mu      sync.Mutex
	handled []types.UID
}

func (d *deleter) Deleted(_ context.Context, del store.Delta[Object]) error {
	if del.Object.UID == d.fail {
		return errors.New("failing on purpose")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.handled = append(d.handled, del.Object.UID)
	return nil
}

// routeLog is an observer that keeps the routes of deletions
// (DeletionRouted), each as "<uid> <route>".
type routeLog struct {
	mu  sync.Mutex
	log []string
}

func (l *routeLog) Observe(e observe.Event) {
	if r, ok := e.(DeletionRouted); ok {
		l.mu.Lock()
		l.log = append(l.log, r.UID+" "+r.Route)
		l.mu.Unlock()
	}
}

func (l *routeLog) routes() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.log)
}

// leavingApp is the part of an App a clean leave's drain uses: a store
// holding the objects named, a watcher whose LISTs find listed, a gate that
// works every slot under a fresh lease, and a controller whose workers stopped (Run returned).
func leavingApp(stored, listed []string, rec reconcile.Reconciler[Object], obs observe.Observer) *App {
	s := store.New[Object]()
	for _, n := range stored {
		s.Upsert(&v1alpha1.MyResource{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: n, UID: types.UID("uid-" + n), ResourceVersion: "5"}})
	}
	a := &App{Store: s, opts: Options{Workers: 2}, gate: newGate(s, obs),
		Sharded: sharding.NewWatcher[Object](listSource{listed}, s, watcher.Options[Object]{Codec: watcher.JSONCodec[Object]{GVK: v1alpha1.GroupVersionKind}}, nil)}
	a.Watcher = a.Sharded.Watcher
	a.gate.set(ring.Claims{Working: shard.All(), Target: shard.All()})
	a.gate.setDeadline(time.Now().Add(time.Hour)) // its lease is fresh: the gate's clock admits
	a.Controller = &reconcile.Controller[Object]{Queue: queue.New(queue.NewExponentialLimiter(10*time.Millisecond, 10*time.Millisecond)),
		Reconciler: gatedReconciler{next: rec, gate: a.gate}}
	a.Controller.Queue.ShutDown()
	return a
}

// The leave's sweep: an object deleted while the watch lagged (still in
// the store, gone from a LIST) is handled as a deletion before the replica
// lets its slots go; the next owner lists the slot after it and would never
// hear of it.
func TestALeaveSweepsTheDeletionsTheWatchHadNotBrought(t *testing.T) {
	rec := &deleter{}
	a := leavingApp([]string{"kept", "gone"}, []string{"kept"}, rec, observe.Func(func(observe.Event) {}))
	stopped := make(chan struct{})
	watcherStopped := false
	close(stopped)
	a.drain(context.Background(), context.Background(), func() { watcherStopped = true }, stopped)
	if !watcherStopped {
		t.Error("the drain did not stop the watcher")
	}
	if len(rec.handled) != 1 || rec.handled[0] != "uid-gone" {
		t.Fatalf("handled %v, want the deletion of uid-gone, which only the sweep found", rec.handled)
	}
}

// A deletion still failing when the drain's time is up is reported
// abandoned (the chaos verdict and the log line count it), and the drain
// returns.
func TestALeaveReportsTheDeletionsItAbandons(t *testing.T) {
	rec := &deleter{fail: "uid-bad"}
	var log routeLog
	a := leavingApp([]string{"bad", "good"}, nil, rec, &log)
	stopped := make(chan struct{})
	close(stopped)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	a.drain(ctx, ctx, func() {}, stopped)
	if ctx.Err() == nil {
		t.Fatal("the drain returned before its time was up, with a deletion still failing")
	}
	if len(rec.handled) != 1 || rec.handled[0] != "uid-good" {
		t.Errorf("handled %v, want uid-good", rec.handled)
	}
	routes := log.routes()
	want := map[string]bool{"uid-bad swept": true, "uid-good swept": true, "uid-bad abandoned": true}
	if len(routes) != len(want) {
		t.Fatalf("routes %v, want %v", routes, want)
	}
	for _, r := range routes {
		if !want[r] {
			t.Fatalf("routes %v, want %v", routes, want)
		}
	}
}

// A replica that comes to work slots it watched replays the deletions it
// held there before it resyncs the keys it took over: the resync queues
// every stored key of the slots (thousands, at a replica's share of a big
// store), and a deletion queued behind them would wait for all of them,
// and die with the replica if it were killed meanwhile.
func TestTakenOverSlotsReplayTheirDeletionsBeforeTheResync(t *testing.T) {
	stored := []string{"doomed"}
	for i := range 50 {
		stored = append(stored, fmt.Sprintf("k%d", i))
	}
	a := leavingApp(stored, nil, &deleter{}, observe.Func(func(observe.Event) {}))
	a.Controller.Queue = queue.New(queue.NewExponentialLimiter(10*time.Millisecond, 10*time.Millisecond))
	defer a.Controller.Queue.ShutDown()
	a.watched = shard.All()
	a.gate.set(ring.Claims{Target: shard.All(), Sweep: shard.All()}) // watched, not worked
	doomed, _ := a.Store.Get("ns/doomed")
	d, _ := a.Store.Delete(doomed)
	if a.gate.admit(d) {
		t.Fatal("a deletion in a slot only watched was admitted")
	}
	a.onClaims(ring.Claims{Working: shard.All(), Target: shard.All()})
	if key, _ := a.Controller.Queue.Get(); key != "ns/doomed" {
		t.Fatalf("the first key the workers get after the take-over is %s (of %d queued); want ns/doomed, the held deletion's", key, a.Controller.Queue.Len()+1)
	}
}
