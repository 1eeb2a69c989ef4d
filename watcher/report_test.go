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
// on every frame (Received, Handed): they are counted in its Stats without
// being made into interfaces. Before, both were boxed for a Fanout of the
// Stats and a nil Observer: "applying an event: 3.0 allocations without an
// Observer, 3.0 with one; want at least 2 fewer without".
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
		n := testing.AllocsPerRun(runs, func() {
			w.apply(Event[*v1alpha1.MyResource]{Type: Modified, RV: objs[i].ResourceVersion, Object: objs[i]}, time.Time{})
			i++
		})
		if got := w.Stats().Events; got != int64(i) {
			t.Errorf("Stats counted %d events of %d", got, i)
		}
		return n
	}
	without, with := allocs(nil), allocs(observe.Func(func(observe.Event) {}))
	if without > with-2 {
		t.Errorf("applying an event: %.1f allocations without an Observer, %.1f with one; want at least 2 fewer without", without, with)
	}
}
