package compare

import (
	"fmt"
	"maps"
	"net/http/httptest"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"rawwatch/api/v1alpha1"
)

// Every kind Kinds and BenchKinds list, built by NewConsumer against the
// replay server, syncs, hears every replayed event and ends holding each
// object at its last resourceVersion. The informers' caches are read as
// they are: the stripped kinds hold no managedFields, the plain informer
// and controller-runtime at its defaults hold what the server sent.
func TestEveryKindDeliversTheReplayedStream(t *testing.T) {
	const objects, events = 50, 400
	list, frames := replayData(objects, events)
	want := map[string]string{}
	for e := range events {
		want["bench/"+objectName(e%objects)] = strconv.Itoa(e + 2)
	}
	if !slices.Contains(Kinds(), KindInformerStripped) || !slices.Contains(Kinds(), KindControllerRuntime) {
		t.Fatalf("Kinds() = %v", Kinds())
	}
	// nobackoff too: broken on purpose in its backoff only.
	for _, kind := range append(append(Kinds(), KindNoBackoff), BenchKinds...) {
		t.Run(kind, func(t *testing.T) {
			g := &gate{}
			srv := httptest.NewServer(replayServer(list, frames, 0, nil, g))
			defer srv.Close()
			c, _, stop := replayTo(t, kind, &rest.Config{Host: srv.URL, QPS: -1}, g, ConsumerConfig{})
			defer stop()
			for deadline := time.Now().Add(time.Minute); c.Events().Updates < events || c.Queued() > 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
					t.Fatalf("%+v events, %d queued after a minute; cache %v", c.Events(), c.Queued(), c.Dump())
				}
			}
			if ev := c.Events(); ev.Adds != objects || ev.Updates != events || ev.Deletes != 0 {
				t.Errorf("events %+v, want %d adds and %d updates", ev, objects, events)
			}
			if kind == KindBare {
				if c.StoreLen() != -1 || c.Dump() != nil {
					t.Errorf("bare caches: %d, %v", c.StoreLen(), c.Dump())
				}
				return
			}
			if got := c.Dump(); c.StoreLen() != objects || !maps.Equal(got, want) {
				t.Errorf("%d cached; dump differs from the server's last versions:\n got %v\nwant %v", c.StoreLen(), got, want)
			}
			var cached []any
			switch cc := c.c.(type) {
			case *informerConsumer:
				cached = cc.informer.GetIndexer().List()
			case *crConsumer:
				cached = (*cc.inf.Load()).GetStore().List()
			default:
				return
			}
			withFields := 0
			for _, o := range cached {
				if len(o.(object).ManagedFields) > 0 {
					withFields++
				}
			}
			if strip := slices.Contains([]string{KindInformerStripped, KindInformerFastDecode, KindControllerRuntimeStripped}, kind); strip && withFields != 0 || !strip && withFields != objects {
				t.Errorf("%d of %d cached objects hold managedFields", withFields, len(cached))
			}
		})
	}
}

func objectName(i int) string { return fmt.Sprintf("obj-%06d", i) }

// cacheTransform strips managedFields with controller-runtime's helper and
// trims the raw store's annotations, each only when asked, and keeps the rest.
func TestCacheTransform(t *testing.T) {
	if cacheTransform(nil, false) != nil {
		t.Error("a transform with nothing to do")
	}
	for _, tc := range []struct {
		drop          []string
		strip         bool
		fields, kept  bool
		droppedRemain bool
	}{
		{drop: []string{"drop"}, strip: true, fields: false, droppedRemain: false},
		{drop: nil, strip: true, fields: false, droppedRemain: true},
		{drop: []string{"drop"}, strip: false, fields: true, droppedRemain: false},
	} {
		o := &v1alpha1.MyResource{ObjectMeta: metav1.ObjectMeta{Name: "a", Annotations: map[string]string{"drop": "x", "keep": "y"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}}}
		got, err := cacheTransform(tc.drop, tc.strip)(o)
		if err != nil {
			t.Fatal(err)
		}
		g := got.(object)
		_, dropped := g.Annotations["drop"]
		if (len(g.ManagedFields) > 0) != tc.fields || dropped != tc.droppedRemain || g.Annotations["keep"] != "y" || g.Name != "a" {
			t.Errorf("drop %v strip %v: managedFields %v, annotations %v", tc.drop, tc.strip, g.ManagedFields, g.Annotations)
		}
	}
}

// The targets against the best anchor take, for each measure, the anchor
// that did best at it, and only anchors whose verdict passed.
func TestTargetsAgainstTheBestAnchor(t *testing.T) {
	ok := Verdict{OK: true}
	r := &Report{Consumers: []ConsumerReport{
		{Kind: KindRaw, Verdict: ok, Latency: LatencyStats{P99: 2}, EventsPerSecond: 900, HeapAfterSync: 50, RelistPeakHeap: 70},
		{Kind: KindInformerList, Verdict: ok, Latency: LatencyStats{P99: 4}, EventsPerSecond: 800, HeapAfterSync: 100, RelistPeakHeap: 200},
		{Kind: KindInformerStripped, Verdict: ok, Latency: LatencyStats{P99: 5}, EventsPerSecond: 850, HeapAfterSync: 60, RelistPeakHeap: 150},
		{Kind: KindControllerRuntime, Verdict: ok, Latency: LatencyStats{P99: 3}, EventsPerSecond: 700, HeapAfterSync: 120, RelistPeakHeap: 250},
		// the best at everything, but it lost events: not an anchor
		{Kind: KindInformer, Verdict: Verdict{}, Latency: LatencyStats{P99: 1}, EventsPerSecond: 5000, HeapAfterSync: 1, RelistPeakHeap: 1},
	}}
	want := map[string]string{
		"latency p99 vs best anchor":      KindControllerRuntime,
		"throughput vs best anchor":       KindInformerStripped,
		"steady heap vs best anchor":      KindInformerStripped,
		"relist peak heap vs best anchor": KindInformerStripped,
	}
	got := map[string]string{}
	for _, tg := range r.targets() {
		if _, ok := want[tg.Name]; ok {
			got[tg.Name], _, _ = strings.Cut(tg.Other, " ")
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("best anchors %v, want %v", got, want)
	}
}
