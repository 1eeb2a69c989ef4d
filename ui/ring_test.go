package ui_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
	"weak"

	"rawwatch/api/v1alpha1"
	"rawwatch/codec"
	"rawwatch/internal/testkit"
	"rawwatch/observe"
	"rawwatch/reconcile"
	"rawwatch/store"
	"rawwatch/ui"
	"rawwatch/watcher"
)

// A buffered event keeps only what the page draws: not the object a
// Received carries, nor the block of strings a decoded object's fields
// share (its resourceVersion is a part of the same allocation as its
// spec's message: metajson's Batch), nor more of an error than MaxText.
// Anyone who may update a MyResource chooses its size (in a cluster with
// an annotation of up to 256 KiB; here in spec.message, which the decoder
// takes whatever the CRD's validation, to hold the shared block too); the
// ring's memory must not follow. Measured with no browser connected,
// against the bound the package doc gives (MaxBytesPerEvent).
func TestABufferedEventKeepsOnlyWhatThePageDraws(t *testing.T) {
	const events, size = 256, 256 << 10
	dec := codec.JSON[*v1alpha1.MyResource]{GVK: v1alpha1.GroupVersionKind}
	huge := strings.Repeat("m", size)
	for _, c := range []struct {
		what  string
		event func(i int) (observe.Event, weak.Pointer[v1alpha1.MyResource])
	}{
		{"a watch event of a 256 KiB object", func(i int) (observe.Event, weak.Pointer[v1alpha1.MyResource]) {
			raw := fmt.Appendf(nil, `{"apiVersion":"example.com/v1alpha1","kind":"MyResource","metadata":{"name":"big-%d","namespace":"ns","uid":"u-%d","resourceVersion":"%d"},"spec":{"message":%q}}`,
				i, i, 1000+i, huge)
			obj, err := dec.Decode("MODIFIED event", raw)
			if err != nil {
				t.Fatal(err)
			}
			return watcher.Received{Type: "MODIFIED", Key: store.KeyOf(obj), RV: obj.GetResourceVersion(), Object: obj}, weak.Make(obj)
		}},
		{"a failed reconcile with a 256 KiB error", func(i int) (observe.Event, weak.Pointer[v1alpha1.MyResource]) {
			return reconcile.Finished{Worker: 1, Key: "ns/big", Took: time.Millisecond, Err: errors.New(huge + fmt.Sprint(i))}, weak.Pointer[v1alpha1.MyResource]{}
		}},
	} {
		h := ui.New(ui.Options{Ring: events})
		objects := make([]weak.Pointer[v1alpha1.MyResource], 0, events)
		before := testkit.HeapAfterGC()
		for i := range events {
			e, obj := c.event(i)
			objects = append(objects, obj)
			h.Observe(e)
		}
		per := (int64(testkit.HeapAfterGC()) - int64(before)) / events
		runtime.KeepAlive(huge)
		alive := 0
		for _, o := range objects {
			if o.Value() != nil {
				alive++
			}
		}
		runtime.KeepAlive(h)
		if alive > 0 {
			t.Errorf("%s: %d of %d objects of buffered events are still alive with no browser connected, want none", c.what, alive, events)
		}
		if per > ui.MaxBytesPerEvent {
			t.Errorf("%s: a buffered event keeps %d bytes of heap, want at most %d", c.what, per, ui.MaxBytesPerEvent)
		}
		t.Logf("%s: heap per buffered event: %d bytes", c.what, per)
	}
}

// A text longer than MaxText reaches the page cut, at a character's start,
// and marked.
func TestALongTextIsCut(t *testing.T) {
	h := ui.New(ui.Options{})
	s := open(t, serve(t, h)+"events")
	long := strings.Repeat("é", ui.MaxText) // two bytes each
	h.Observe(reconcile.Finished{Worker: 1, Key: "ns/a", Err: errors.New(long)})
	it := s.until("item", func(v map[string]any) bool { return v["kind"] == "reconcile" })
	got := it["err"].(string)
	if len(got) > ui.MaxText || !strings.HasSuffix(got, "…") || !utf8.ValidString(got) || !strings.HasPrefix(long, strings.TrimSuffix(got, "…")) {
		t.Errorf("a %d-byte error reached the page as %d bytes %q…, want at most %d, cut at a character and marked", len(long), len(got), got[:20], ui.MaxText)
	}
}
