package watcher

import (
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/api/v1alpha1"
	"rawwatch/observe"
	"rawwatch/store"
)

// A watcher without an Observer pays nothing for the two events it reports
// on every frame (Received, Handed): they are not made into interfaces.
func TestApplyAllocatesForAnObserverOnly(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	allocs := func(obs observe.Observer) float64 {
		const runs = 200
		objs := make([]*v1alpha1.MyResource, runs+1)
		for i := range objs {
			objs[i] = &v1alpha1.MyResource{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", ResourceVersion: strconv.Itoa(i + 1)}}
		}
		w := New(nil, store.New[*v1alpha1.MyResource](), Options[*v1alpha1.MyResource]{Observer: obs})
		i := 0
		return testing.AllocsPerRun(runs, func() {
			w.apply(Event[*v1alpha1.MyResource]{Type: Modified, RV: objs[i].ResourceVersion, Object: objs[i]}, time.Time{})
			i++
		})
	}
	without, with := allocs(nil), allocs(observe.Func(func(observe.Event) {}))
	if without > with-2 {
		t.Errorf("applying an event: %.1f allocations without an Observer, %.1f with one; want at least 2 fewer without", without, with)
	}
}

// With an Observer, Received carries the type, the key and the write time
// of every event, the duplicate delivery (no change, no delta) included.
func TestReceivedCarriesKeyAndWriteTimeForAnObserver(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	written := metav1.NewTime(created.Add(time.Minute))
	object := func() *v1alpha1.MyResource {
		return &v1alpha1.MyResource{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", ResourceVersion: "5", CreationTimestamp: created,
			ManagedFields: []metav1.ManagedFieldsEntry{{Time: &written}}}}
	}
	var got []Received
	w := New(nil, store.New[*v1alpha1.MyResource](), Options[*v1alpha1.MyResource]{Observer: observe.Func(func(e observe.Event) {
		if r, ok := e.(Received); ok {
			got = append(got, r)
		}
	})})
	types := []string{Added, Modified, Deleted, Deleted} // the MODIFIED at the stored RV: unchanged
	for _, typ := range types {
		w.apply(Event[*v1alpha1.MyResource]{Type: typ, RV: "5", Object: object()}, time.Time{})
	}
	if len(got) != 4 {
		t.Fatalf("%d Received for 4 events", len(got))
	}
	for i, r := range got {
		want := written.Time
		if r.Type == Deleted {
			want = time.Time{} // not asked of a deletion
		}
		if r.Type != types[i] || r.Key != "ns/a" || !r.Written.Equal(want) {
			t.Errorf("event %d (%s): Received %s key %q written %v, want ns/a and %v", i, types[i], r.Type, r.Key, r.Written, want)
		}
	}
}
