package app_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"rawwatch/api/v1alpha1"
	"rawwatch/app"
	"rawwatch/client"
	"rawwatch/internal/testkit"
	"rawwatch/observe"
	"rawwatch/reconcile"
	"rawwatch/reconcile/myresource"
	"rawwatch/store"
)

func TestMain(m *testing.M) { testkit.Main(m) }

type object = app.Object

// spy wraps the real reconciler and status writer: it records every call,
// counts writes, and fails the test if one key is reconciled by two workers
// at once.
type spy struct {
	t     *testing.T
	inner reconcile.Reconciler[object]
	write myresource.StatusWriter

	mu      sync.Mutex
	busy    map[string]bool
	calls   map[string][]call
	writes  map[string]int
	onWrite func(ctx context.Context, obj object) // runs before a write (test hooks)
	writeEr []error
}

type call struct {
	at      time.Time
	deleted bool
	err     error
}

func newSpy(t *testing.T) *spy {
	return &spy{t: t, busy: map[string]bool{}, calls: map[string][]call{}, writes: map[string]int{}}
}

func (s *spy) Reconcile(ctx context.Context, key string) error {
	s.enter(key)
	err := s.inner.Reconcile(ctx, key)
	s.leave(key, call{at: time.Now(), err: err})
	return err
}

func (s *spy) Deleted(ctx context.Context, d store.Delta[object]) error {
	s.enter(d.Key)
	err := s.inner.Deleted(ctx, d)
	s.leave(d.Key, call{at: time.Now(), deleted: true, err: err})
	return err
}

func (s *spy) enter(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy[key] {
		s.t.Errorf("key %s reconciled by two workers at once", key)
	}
	s.busy[key] = true
}

func (s *spy) leave(key string, c call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy[key] = false
	s.calls[key] = append(s.calls[key], c)
}

func (s *spy) UpdateStatus(ctx context.Context, obj object) (object, error) {
	if s.onWrite != nil {
		s.onWrite(ctx, obj)
	}
	out, err := s.write.UpdateStatus(ctx, obj)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		s.writes[obj.Namespace+"/"+obj.Name]++
	} else {
		s.writeEr = append(s.writeEr, err)
	}
	return out, err
}

func (s *spy) callsOf(key string) []call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]call(nil), s.calls[key]...)
}

func (s *spy) writesOf(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes[key]
}

// startApp runs the assembled controller on namespace ns until the test ends.
func startApp(t *testing.T, ns string, workers int) (*app.App, *spy, *testkit.Logs) {
	t.Helper()
	return startAppWith(t, app.Options{Config: testkit.Shared.Get(t).Config(), Namespace: ns, Workers: workers,
		RetryBase: 20 * time.Millisecond})
}

// startAppWith runs the controller with opts (its wrappers are set here,
// its log goes to the returned Logs) until the test ends, and waits for its first list.
func startAppWith(t *testing.T, opts app.Options) (*app.App, *spy, *testkit.Logs) {
	t.Helper()
	s := newSpy(t)
	logs := &testkit.Logs{}
	opts.WrapStatusWriter = func(w myresource.StatusWriter) myresource.StatusWriter {
		s.write = w
		return s
	}
	opts.WrapReconciler = func(r reconcile.Reconciler[object]) reconcile.Reconciler[object] {
		s.inner = r
		return s
	}
	a, err := app.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logs.Logger(2)))
	done := make(chan error)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	testkit.Eventually(t, time.Minute, func() bool {
		select {
		case <-a.Watcher.Synced():
			return true
		default:
			return false
		}
	}, "controller did not sync")
	return a, s, logs
}

func waitStatus(t *testing.T, c *client.Client, ns, name string, ok func(*v1alpha1.MyResource) bool, what string) *v1alpha1.MyResource {
	t.Helper()
	var last *v1alpha1.MyResource
	testkit.Eventually(t, 30*time.Second, func() bool {
		obj, err := c.Get(context.Background(), ns, name)
		if err != nil {
			return false
		}
		last = obj
		return ok(obj)
	}, "%s/%s: %s; last status %v", ns, name, what, lastStatus{&last})
	return last
}

// lastStatus prints the status of the last object read, when the message is
// formatted (after the wait), not when the wait begins.
type lastStatus struct{ obj **v1alpha1.MyResource }

func (l lastStatus) String() string {
	if *l.obj == nil {
		return "(never read)"
	}
	return fmt.Sprintf("%+v", (*l.obj).Status)
}

func TestCreateUpdateDelete(t *testing.T) {
	cp, ns, c := testkit.Parallel(t)
	ctx := context.Background()
	a, spy, _ := startApp(t, ns, 2)
	key := ns + "/demo"

	created := testkit.Create(t, c, ns, "demo", "hello")
	obj := waitStatus(t, c, ns, "demo", func(o *v1alpha1.MyResource) bool {
		return o.Status.Phase == v1alpha1.PhaseProcessed && o.Status.ObservedGeneration == 1
	}, "want Processed at generation 1")
	if obj.Status.Message != "hello" || !meta.IsStatusConditionTrue(obj.Status.Conditions, v1alpha1.ConditionReady) {
		t.Errorf("status = %+v", obj.Status)
	}

	// The status write went through /status: a status sent with a spec update is ignored.
	obj.Spec.Message = "hello again"
	obj.Status.Phase = "Failed"
	if _, err := c.Update(ctx, obj); err != nil {
		t.Fatal(err)
	}
	obj = waitStatus(t, c, ns, "demo", func(o *v1alpha1.MyResource) bool {
		return o.Generation == 2 && o.Status.ObservedGeneration == 2 && o.Status.Message == "hello again"
	}, "want observedGeneration 2 after a spec update")
	if obj.Status.Phase != v1alpha1.PhaseProcessed {
		t.Errorf("phase %q: the main resource endpoint must not have changed the status", obj.Status.Phase)
	}

	// Events are recorded on the object (what kubectl describe shows).
	testkit.WaitForEvent(t, cp.Config(), ns, "demo", "Processed, for the object", func(e corev1.Event) bool {
		return e.Reason == myresource.ReasonProcessed && e.InvolvedObject.UID == created.UID
	})

	// Idempotence: a reconcile with nothing changed writes nothing. (First
	// let the store catch up with the server and the key go quiet: on a
	// loaded machine a reconcile of an older version may still be on its
	// way.)
	testkit.Eventually(t, 30*time.Second, func() bool {
		cur, err := c.Get(ctx, ns, "demo")
		stored, ok := a.Store.Get(key)
		return err == nil && ok && stored.ResourceVersion == cur.ResourceVersion && a.Queue.Len() == 0
	}, "the store did not catch up with the server")
	time.Sleep(200 * time.Millisecond)
	writes, calls := spy.writesOf(key), len(spy.callsOf(key))
	a.Queue.Add(key)
	testkit.Eventually(t, 10*time.Second, func() bool { return len(spy.callsOf(key)) > calls }, "no reconcile after Add")
	if spy.writesOf(key) != writes {
		t.Errorf("a reconcile with nothing changed made %d writes", spy.writesOf(key)-writes)
	}

	before := len(spy.callsOf(key))
	if err := c.Delete(ctx, ns, "demo", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, func() bool {
		calls := spy.callsOf(key)
		return slices.ContainsFunc(calls[min(before, len(calls)):], func(c call) bool { return c.deleted && c.err == nil })
	}, "the reconciler never saw the deletion")
}

// The cache leaves out the annotations the reconciler never reads, and the
// status written from that trimmed copy leaves them on the server: a write
// through /status changes nothing but the status.
func TestTheCacheDropsAnnotationsTheReconcilerNeverReads(t *testing.T) {
	cp, ns, c := testkit.Parallel(t)
	a, _, _ := startAppWith(t, app.Options{Config: cp.Config(), Namespace: ns, Workers: 1,
		CacheDropAnnotations: myresource.UnreadAnnotations})

	obj := testkit.New(ns, "applied", "hello")
	lastApplied := `{"apiVersion":"example.com/v1alpha1","kind":"MyResource","spec":{"message":"hello"}}`
	obj.Annotations = map[string]string{corev1.LastAppliedConfigAnnotation: lastApplied, "example.com/kept": "yes"}
	if _, err := c.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	onServer := waitStatus(t, c, ns, "applied", func(o *v1alpha1.MyResource) bool {
		return o.Status.Phase == v1alpha1.PhaseProcessed
	}, "want Processed")
	if got := onServer.Annotations[corev1.LastAppliedConfigAnnotation]; got != lastApplied {
		t.Errorf("on the server after the status write: last-applied-configuration = %q, want it untouched", got)
	}
	cached, ok := a.Store.Get(ns + "/applied")
	if !ok {
		t.Fatal("not in the store")
	}
	if _, has := cached.Annotations[corev1.LastAppliedConfigAnnotation]; has || cached.Annotations["example.com/kept"] != "yes" {
		t.Errorf("cached annotations %v: want example.com/kept only", cached.Annotations)
	}
}

func TestFailRetriesWithGrowingDelay(t *testing.T) {
	_, ns, c := testkit.Parallel(t)
	key := ns + "/broken"
	// The delays the controller chose for the key's failures (not its
	// conflicts: a retry 20 ms after the first write may read the cache
	// before the watch has brought that write back, and the server answers
	// 409, retried after ConflictRetry).
	var mu sync.Mutex
	var delays []time.Duration
	_, spy, _ := startAppWith(t, app.Options{Config: testkit.Shared.Get(t).Config(), Namespace: ns, Workers: 2,
		RetryBase: 20 * time.Millisecond, Observer: observe.Func(func(e observe.Event) {
			if f, ok := e.(reconcile.Finished); ok && f.Key == key && errors.Is(f.Err, myresource.ErrRequestedFailure) {
				mu.Lock()
				delays = append(delays, f.RetryIn)
				mu.Unlock()
			}
		})})
	testkit.Create(t, c, ns, "broken", myresource.FailMessage)
	obj := waitStatus(t, c, ns, "broken", func(o *v1alpha1.MyResource) bool { return o.Status.Phase == v1alpha1.PhaseFailed },
		"want Failed")
	if !strings.Contains(obj.Status.Message, "fail") || meta.IsStatusConditionTrue(obj.Status.Conditions, v1alpha1.ConditionReady) {
		t.Errorf("status = %+v", obj.Status)
	}
	// Retries at 20 ms, 40, 80, 160, 320, 640...: wait for eight calls.
	testkit.Eventually(t, 30*time.Second, func() bool { return len(spy.callsOf(key)) >= 8 }, "not retried")
	calls := spy.callsOf(key)
	for _, c := range calls {
		if !errors.Is(c.err, myresource.ErrRequestedFailure) && !apierrors.IsConflict(c.err) {
			t.Fatalf("call returned %v", c.err)
		}
	}
	// Each failure's delay is twice the one before (the limiter's choice,
	// which a busy machine does not move) ...
	mu.Lock()
	got := slices.Clone(delays)
	mu.Unlock()
	if len(got) < 4 {
		t.Fatalf("%d failures with a delay, want at least 4", len(got))
	}
	for i := 1; i < len(got); i++ {
		if got[i] != 2*got[i-1] {
			t.Fatalf("retry delays %v: each must be twice the one before", got)
		}
	}
	// ... and a retry never comes before its delay is up (a busy machine
	// only makes it later): the gap after the last but one call, a
	// failure, is at least the delay chosen for it.
	k := -1 // its number among the failures
	for _, c := range calls[:len(calls)-1] {
		if errors.Is(c.err, myresource.ErrRequestedFailure) {
			k++
		}
	}
	if gap := calls[len(calls)-1].at.Sub(calls[len(calls)-2].at); k >= 0 && k < len(got) && gap < got[k] {
		t.Errorf("the last retry came %v after the failure before it, whose delay was %v", gap, got[k])
	}
	if spy.writesOf(key) != 1 {
		t.Errorf("%d status writes for a failing object; retries must not rewrite an unchanged status", spy.writesOf(key))
	}
}

// A status write based on a stale object gets a real 409 from the server; the
// controller retries quietly and converges.
func TestConflictIsRetriedQuietly(t *testing.T) {
	_, ns, c := testkit.Parallel(t)
	_, spy, logs := startApp(t, ns, 2)
	var once sync.Once
	spy.onWrite = func(ctx context.Context, obj object) {
		once.Do(func() { // someone else writes the object first
			cur, err := c.Get(ctx, obj.Namespace, obj.Name)
			if err == nil {
				cur.Labels = map[string]string{"touched": "yes"}
				_, err = c.Update(ctx, cur)
			}
			if err != nil {
				t.Errorf("concurrent update: %v", err)
			}
		})
	}
	testkit.Create(t, c, ns, "contended", "hi")
	waitStatus(t, c, ns, "contended", func(o *v1alpha1.MyResource) bool { return o.Status.Phase == v1alpha1.PhaseProcessed }, "want Processed")
	spy.mu.Lock()
	conflicts := 0
	for _, err := range spy.writeEr {
		if apierrors.IsConflict(err) {
			conflicts++
		}
	}
	spy.mu.Unlock()
	if conflicts != 1 {
		t.Fatalf("%d conflicts from the server, want 1", conflicts)
	}
	if n := logs.Count("Reconcile failed"); n != 0 {
		t.Errorf("a conflict was logged as an error %d times", n)
	}
}

// Many updates to many keys with four workers: every key converges and no key
// is ever in two workers at once (the spy checks).
func TestManyUpdatesConverge(t *testing.T) {
	_, ns, c := testkit.Parallel(t)
	ctx := context.Background()
	a, _, _ := startApp(t, ns, 4)
	testkit.Objects(t, c, ns, "obj", 50)
	for round := range 3 {
		var wg sync.WaitGroup
		for i := range 50 {
			wg.Go(func() {
				name := fmt.Sprintf("obj-%d", i)
				for {
					o, err := c.Get(ctx, ns, name)
					if err != nil {
						t.Error(err)
						return
					}
					o.Spec.Message = fmt.Sprintf("round %d", round)
					if _, err = c.Update(ctx, o); !apierrors.IsConflict(err) {
						if err != nil {
							t.Error(err)
						}
						return
					}
				}
			})
		}
		wg.Wait()
	}
	testkit.Eventually(t, time.Minute, func() bool {
		list, err := c.List(ctx, ns, metav1.ListOptions{})
		if err != nil || len(list.Items) != 50 {
			return false
		}
		for _, o := range list.Items {
			if o.Status.ObservedGeneration != o.Generation || o.Status.Message != "round 2" {
				return false
			}
		}
		return true
	}, "not every object reached status for its last generation")
	if a.Store.Len() != 50 {
		t.Errorf("store has %d objects", a.Store.Len())
	}
}
