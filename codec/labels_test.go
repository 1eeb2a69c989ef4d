package codec

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"rawwatch/api/v1alpha1"
	"rawwatch/store"
	"rawwatch/watcher"
	"rawwatch/wire"
)

// A watch stream's objects whose labels are written alike get one map from
// the decoder when the store shares (store.Share: it would otherwise drop
// each equal map for the one it holds), unless the store's transform may
// change labels in place: then a transform that does never reaches another
// object. A store that does not share gets one map per object.
func TestStreamLabelsShareOneMapUnlessTheTransformMayChangeThem(t *testing.T) {
	stream := strings.Join([]string{
		ev(watcher.Added, `"name":"a","namespace":"ns","resourceVersion":"1","labels":{"app":"x","tier":"web"}`, ``),
		ev(watcher.Added, `"name":"b","namespace":"ns","resourceVersion":"2","labels":{"app":"x","tier":"web"}`, ``),
		ev(watcher.Modified, `"name":"a","namespace":"ns","resourceVersion":"3","labels":{"app":"x","tier":"web"}`, ``),
		ev(watcher.Added, `"name":"c","namespace":"ns","resourceVersion":"4","labels":{"app":"y"}`, ``),
	}, "")
	for _, c := range []struct {
		name    string
		set     func(*store.Store[*v1alpha1.MyResource])
		shared  bool
		changed bool // the transform adds mine=<name>
	}{
		{"no sharing", func(*store.Store[*v1alpha1.MyResource]) {}, false, false},
		{"no transform", func(s *store.Store[*v1alpha1.MyResource]) { s.Share() }, true, false},
		{"a transform keeping labels", func(s *store.Store[*v1alpha1.MyResource]) {
			s.Share()
			s.SetTransformKeepingLabels(store.DropAnnotations[*v1alpha1.MyResource]("x"))
		}, true, false},
		{"a transform changing labels in place", func(s *store.Store[*v1alpha1.MyResource]) {
			s.Share()
			s.SetTransform(func(o *v1alpha1.MyResource) { o.Labels["mine"] = o.Name })
		}, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := store.New[*v1alpha1.MyResource]()
			c.set(st)
			w := sharing(st)
			dec := newEventDecoder(strings.NewReader(stream), w.withLabels())
			var decoded []map[string]string // each object's labels as decoded
			for range 4 {
				e, err := dec.Next()
				if err != nil {
					t.Fatal(err)
				}
				decoded = append(decoded, e.Object.Labels)
				apply(st, e)
			}
			maps := map[uintptr]bool{}
			for _, m := range decoded[:3] {
				maps[reflect.ValueOf(m).Pointer()] = true
			}
			if c.shared && len(maps) != 1 || !c.shared && len(maps) != 3 {
				t.Errorf("%s: the stream's equal labels decoded into %d maps, want %s", c.name, len(maps),
					map[bool]string{true: "one", false: "one each"}[c.shared])
			}
			for name, want := range map[string]string{"a": "map[app:x tier:web]", "b": "map[app:x tier:web]", "c": "map[app:y]"} {
				if c.changed {
					want = map[string]string{"a": "map[app:x mine:a tier:web]", "b": "map[app:x mine:b tier:web]", "c": "map[app:y mine:c]"}[name]
				}
				if o, _ := st.Get("ns/" + name); fmt.Sprint(o.Labels) != want {
					t.Errorf("%s: %s's labels %v, want %s", c.name, name, o.Labels, want)
				}
			}
		})
	}
}

// A LIST page's items whose labels are written alike get one map too (the
// store shares), and every item is what it is decoded without (the
// recorded pages, and a page of labels alike, escaped, repeated and not).
func TestListLabelsShareOneMap(t *testing.T) {
	item := func(name, labels string) string {
		return `{` + objHead + `,"metadata":{"name":"` + name + `","namespace":"ns","resourceVersion":"1","labels":` + labels + `}}`
	}
	page := []byte(`{"metadata":{"resourceVersion":"9"},"items":[` + strings.Join([]string{
		item("a", `{"app":"x"}`), item("b", `{"app":"x"}`), item("c", `{"app":"x"}`), item("d", `{"app":"x\u0041"}`),
		item("e", `{"app":"x\u0041"}`), item("f", `{"app":"x","app":"y"}`), item("g", `{"app":"x","app":"y"}`), item("h", `{}`),
	}, ",") + `]}`)
	st := store.New[*v1alpha1.MyResource]()
	st.Share()
	w := sharing(st)
	for name, data := range map[string][]byte{"page": page, wire.ListPage1: wire.MustRead(t, wire.ListPage1), wire.ListPage2: wire.MustRead(t, wire.ListPage2)} {
		var alike, apart []*v1alpha1.MyResource
		labelled := w.withLabels()
		for c, to := range map[*JSON[*v1alpha1.MyResource]]*[]*v1alpha1.MyResource{&codec: &apart, &labelled: &alike} {
			if _, err := decodeList(bytes.NewReader(data), *c, func(o *v1alpha1.MyResource) { *to = append(*to, o) }, func(s *watcher.SkipError) { t.Fatal(s) }); err != nil {
				t.Fatal(err)
			}
		}
		if len(alike) != len(apart) || len(alike) == 0 {
			t.Fatalf("%s: %d items with the labels' cache, %d without", name, len(alike), len(apart))
		}
		for i := range alike {
			if !reflect.DeepEqual(alike[i], apart[i]) {
				t.Fatalf("%s: item %d with the labels' cache %+v, without %+v", name, i, alike[i], apart[i])
			}
		}
		if name == "page" {
			same := func(i, j int) bool {
				return reflect.ValueOf(alike[i].Labels).Pointer() == reflect.ValueOf(alike[j].Labels).Pointer()
			}
			if !same(0, 1) || !same(1, 2) || !same(3, 4) || !same(5, 6) || same(2, 3) || same(4, 5) {
				t.Errorf("labels alike in one map: a-b-c %v %v, d-e %v, f-g %v; apart: c-d %v, e-f %v",
					same(0, 1), same(1, 2), same(3, 4), same(5, 6), same(2, 3), same(4, 5))
			}
		}
	}
}

// The watch loop's work per event on BenchmarkDelivery's stream (decode,
// store, observers), with the stream's labels in one map (store.Share) and
// one map each (the store's default):
//
//	go test -run '^$' -bench LabelsPerEvent ./codec
func BenchmarkLabelsPerEvent(b *testing.B) {
	const objects, events = 1000, 20000
	var stream bytes.Buffer
	for i := range events {
		fmt.Fprintf(&stream, `{"type":"MODIFIED","object":{"apiVersion":"example.com/v1alpha1","kind":"MyResource","metadata":{"name":"obj-%06d","namespace":"bench","uid":"6f1e9a1c-0000-4000-8000-%012d","resourceVersion":"%d","generation":%d,"creationTimestamp":"2026-12-01T00:00:00Z","labels":{"app":"compare"},"managedFields":[{"manager":"compare","operation":"Update","apiVersion":"example.com/v1alpha1","time":"2026-12-01T00:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{".":{},"f:message":{}}}}]},"spec":{"message":"update %d"},"status":{"phase":"Processed","message":"processed","observedGeneration":%d}}}`+"\n",
			i%objects, i%objects, 1000+i, 1000+i, i, 1000+i)
	}
	for _, shared := range []bool{true, false} {
		b.Run(fmt.Sprintf("shared=%v", shared), func(b *testing.B) {
			st := store.New[*v1alpha1.MyResource]()
			if shared {
				st.Share()
			}
			w := sharing(st)
			b.ReportAllocs()
			for b.Loop() {
				dec := newEventDecoder(bytes.NewReader(stream.Bytes()), w.withLabels())
				for range events {
					e, err := dec.Next()
					if err != nil {
						b.Fatal(err)
					}
					apply(st, e)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*events), "ns/event")
		})
	}
}

// A transform that changes labels in place changes only its own object's,
// however the objects come: here by LIST (readList's codec), the watch's
// case being TestStreamLabelsShareOneMapUnlessTheTransformMayChangeThem.
func TestListedLabelsChangedByATransformStayTheirOwn(t *testing.T) {
	item := func(name string) string {
		return `{` + objHead + `,"metadata":{"name":"` + name + `","namespace":"ns","resourceVersion":"1","labels":{"app":"x"}}}`
	}
	page := `{"metadata":{"resourceVersion":"9"},"items":[` + item("a") + `,` + item("b") + `,` + item("c") + `]}`
	st := store.New[*v1alpha1.MyResource]()
	st.Share()
	st.SetTransform(func(o *v1alpha1.MyResource) { o.Labels["mine"] = o.Name })
	repl := st.NewReplacement()
	if _, err := sharing(st).DecodeList(strings.NewReader(page), repl.Add, func(*watcher.SkipError) {}); err != nil {
		t.Fatal(err)
	}
	repl.Commit()
	for _, name := range []string{"a", "b", "c"} {
		if o, ok := st.Get("ns/" + name); !ok || fmt.Sprint(o.Labels) != "map[app:x mine:"+name+"]" {
			t.Errorf("%s's labels after the LIST: %v", name, o.Labels)
		}
	}
}
