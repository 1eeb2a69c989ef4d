package myresource

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"rawwatch/api/v1alpha1"
	"rawwatch/internal/testkit"
	"rawwatch/store"
)

type object = *v1alpha1.MyResource

var myResource = testkit.MyResource

var t0 = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

func TestDesired(t *testing.T) {
	ok := Desired(myResource("a", "hello", 3), t0)
	if ok.Phase != v1alpha1.PhaseProcessed || ok.Message != "hello" || ok.ObservedGeneration != 3 {
		t.Fatalf("processed status = %+v", ok)
	}
	if c := ok.Conditions; len(c) != 1 || c[0].Type != "Ready" || c[0].Status != metav1.ConditionTrue || c[0].ObservedGeneration != 3 {
		t.Fatalf("conditions = %+v", c)
	}
	failed := Desired(myResource("b", "fail", 1), t0)
	if failed.Phase != v1alpha1.PhaseFailed || failed.Conditions[0].Status != metav1.ConditionFalse || !strings.Contains(failed.Message, "fail") {
		t.Fatalf("failed status = %+v", failed)
	}
	// An object whose status is already what Desired says needs nothing: the
	// condition keeps its transition time, so a later clock changes nothing.
	up := myResource("a", "hello", 3)
	up.Status = ok
	if again := Desired(up, metav1.NewTime(t0.Add(time.Hour))); !equality.Semantic.DeepEqual(again, up.Status) {
		t.Fatalf("Desired of an up-to-date object changed it:\n%+v\n%+v", again, up.Status)
	}
	// A status change moves the transition time.
	up.Spec.Message = "fail"
	if c := Desired(up, metav1.NewTime(t0.Add(time.Hour))).Conditions[0]; !c.LastTransitionTime.Equal(&metav1.Time{Time: t0.Add(time.Hour)}) {
		t.Fatalf("transition time not updated: %v", c.LastTransitionTime)
	}
}

// fakeWriter records status writes and can fail them.
type fakeWriter struct {
	mu     sync.Mutex
	writes []object
	err    error
}

func (f *fakeWriter) UpdateStatus(_ context.Context, obj object) (object, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	f.writes = append(f.writes, obj)
	return obj, nil
}

func newReconciler(objs ...object) (*Reconciler, *fakeWriter, *record.FakeRecorder) {
	s := store.New[object]()
	for _, o := range objs {
		s.Upsert(o)
	}
	w := &fakeWriter{}
	rec := record.NewFakeRecorder(10)
	return &Reconciler{Store: s, Client: w, Recorder: rec, Now: func() metav1.Time { return t0 }}, w, rec
}

func TestReconcileWritesOnceAndNeverTouchesTheCache(t *testing.T) {
	cached := myResource("a", "hello", 2)
	r, w, events := newReconciler(cached)
	ctx := context.Background()

	if err := r.Reconcile(ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if len(w.writes) != 1 || w.writes[0].Status.Phase != v1alpha1.PhaseProcessed || w.writes[0].Status.ObservedGeneration != 2 {
		t.Fatalf("writes = %+v", w.writes)
	}
	if w.writes[0] == cached || cached.Status.Phase != "" {
		t.Fatal("the reconciler modified the cached object instead of a copy")
	}
	if ev := <-events.Events; !strings.HasPrefix(ev, "Normal Processed") {
		t.Fatalf("event = %q", ev)
	}

	// The watch brings back the written object; reconciling again writes nothing.
	written := w.writes[0].DeepCopy()
	written.ResourceVersion = "2"
	r.Store.(*store.Store[object]).Upsert(written)
	if err := r.Reconcile(ctx, "ns/a"); err != nil {
		t.Fatal(err)
	}
	if len(w.writes) != 1 {
		t.Fatalf("a re-run with nothing changed wrote %d more times", len(w.writes)-1)
	}
	if len(events.Events) != 0 {
		t.Fatal("a re-run with nothing changed recorded an event")
	}
}

func TestReconcileFailMessage(t *testing.T) {
	r, w, events := newReconciler(myResource("f", "fail", 1))
	ctx := context.Background()
	if err := r.Reconcile(ctx, "ns/f"); !errors.Is(err, ErrRequestedFailure) {
		t.Fatalf("err = %v", err)
	}
	if len(w.writes) != 1 || w.writes[0].Status.Phase != v1alpha1.PhaseFailed {
		t.Fatalf("writes = %+v", w.writes)
	}
	if ev := <-events.Events; !strings.HasPrefix(ev, "Warning ReconcileFailed") {
		t.Fatalf("event = %q", ev)
	}
	r.Store.(*store.Store[object]).Upsert(func() object { o := w.writes[0].DeepCopy(); o.ResourceVersion = "2"; return o }())
	// Still failing: an error again (so the queue retries), but no new write.
	if err := r.Reconcile(ctx, "ns/f"); !errors.Is(err, ErrRequestedFailure) || len(w.writes) != 1 {
		t.Fatalf("retry: err %v, writes %d", err, len(w.writes))
	}
}

func TestReconcileWriteErrors(t *testing.T) {
	r, w, _ := newReconciler(myResource("a", "hello", 1))
	w.err = apierrors.NewNotFound(schema.GroupResource{Group: "example.com", Resource: "myresources"}, "a")
	if err := r.Reconcile(context.Background(), "ns/a"); err != nil {
		t.Fatalf("NotFound (deleted meanwhile) must not be an error: %v", err)
	}
	w.err = apierrors.NewConflict(schema.GroupResource{Group: "example.com", Resource: "myresources"}, "a", errors.New("stale"))
	if err := r.Reconcile(context.Background(), "ns/a"); !apierrors.IsConflict(err) {
		t.Fatalf("a conflict must reach the controller as one: %v", err)
	}
}

func TestReconcileDeletion(t *testing.T) {
	r, w, _ := newReconciler()
	logs := &testkit.Logs{}
	ctx := klog.NewContext(context.Background(), logs.Logger(0))
	last := myResource("gone", "hello", 1)
	last.Status.Phase = v1alpha1.PhaseProcessed
	earlier := myResource("gone", "hello", 1)
	earlier.UID = "uid-earlier"
	for _, d := range []store.Delta[object]{
		{Type: store.Deleted, Key: "ns/gone", Object: earlier},
		{Type: store.Deleted, Key: "ns/gone", Object: last, FinalStateUnknown: true},
	} {
		if err := r.Deleted(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Reconcile(ctx, "ns/gone"); err != nil || len(w.writes) != 0 {
		t.Fatalf("err %v, writes %d", err, len(w.writes))
	}
	lines := logs.Grep("MyResource deleted")
	if len(lines) != 2 || !strings.Contains(lines[0], `"uid"="uid-earlier"`) ||
		!strings.Contains(lines[1], `"finalStateUnknown"=true`) || !strings.Contains(lines[1], `"lastPhase"="Processed"`) {
		t.Fatalf("deletion log = %v", lines)
	}
}

// The event policy: all records both kinds, warnings only the failure,
// none nothing; the status is written alike under each.
func TestEventPolicy(t *testing.T) {
	for _, tc := range []struct {
		policy     EventPolicy
		okEvent    bool
		failEvent  bool
		parseError bool
	}{
		{"", true, true, true}, {EventsAll, true, true, false}, {EventsWarnings, false, true, false}, {EventsNone, false, false, false},
	} {
		ok, fail := myResource("ok", "hello", 1), myResource("bad", FailMessage, 1)
		r, w, events := newReconciler(ok, fail)
		r.Events = tc.policy
		_ = r.Reconcile(context.Background(), "ns/ok")
		_ = r.Reconcile(context.Background(), "ns/bad")
		if len(w.writes) != 2 {
			t.Errorf("%q: %d status writes, want 2", tc.policy, len(w.writes))
		}
		var got []string
		for len(events.Events) > 0 {
			got = append(got, <-events.Events)
		}
		want := 0
		if tc.okEvent {
			want++
			if len(got) == 0 || !strings.HasPrefix(got[0], "Normal Processed") {
				t.Errorf("%q: events %q, want a Normal Processed first", tc.policy, got)
			}
		}
		if tc.failEvent {
			want++
			if len(got) == 0 || !strings.HasPrefix(got[len(got)-1], "Warning ReconcileFailed") {
				t.Errorf("%q: events %q, want a Warning ReconcileFailed last", tc.policy, got)
			}
		}
		if len(got) != want {
			t.Errorf("%q: events %q, want %d", tc.policy, got, want)
		}
		if p, err := ParseEventPolicy(string(tc.policy)); (err != nil) != tc.parseError || (err == nil && p != tc.policy) {
			t.Errorf("ParseEventPolicy(%q) = %q, %v", tc.policy, p, err)
		}
	}
}
