package watcher

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"rawwatch/api/v1alpha1"
	"rawwatch/store"
)

// A watch stream's objects whose labels are written alike get one map from
// the decoder (the store would otherwise drop each equal map for the one it
// holds), unless the store's transform may change labels in place: then a
// transform that does never reaches another object. On the code before the
// decoder shared maps, the first case failed with:
//
//	no transform: the stream's equal labels decoded into 3 maps, want one
func TestStreamLabelsShareOneMapUnlessTheTransformMayChangeThem(t *testing.T) {
	stream := strings.Join([]string{
		ev(Added, `"name":"a","namespace":"ns","resourceVersion":"1","labels":{"app":"x","tier":"web"}`, ``),
		ev(Added, `"name":"b","namespace":"ns","resourceVersion":"2","labels":{"app":"x","tier":"web"}`, ``),
		ev(Modified, `"name":"a","namespace":"ns","resourceVersion":"3","labels":{"app":"x","tier":"web"}`, ``),
		ev(Added, `"name":"c","namespace":"ns","resourceVersion":"4","labels":{"app":"y"}`, ``),
	}, "")
	for _, c := range []struct {
		name    string
		set     func(*store.Store[*v1alpha1.MyResource])
		shared  bool
		changed bool // the transform adds mine=<name>
	}{
		{"no transform", func(*store.Store[*v1alpha1.MyResource]) {}, true, false},
		{"a transform keeping labels", func(s *store.Store[*v1alpha1.MyResource]) {
			s.SetTransformKeepingLabels(store.DropAnnotations[*v1alpha1.MyResource]("x"))
		}, true, false},
		{"a transform changing labels in place", func(s *store.Store[*v1alpha1.MyResource]) {
			s.SetTransform(func(o *v1alpha1.MyResource) { o.Labels["mine"] = o.Name })
		}, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := store.New[*v1alpha1.MyResource]()
			c.set(st)
			w := New(nil, st, Options[*v1alpha1.MyResource]{Codec: codec})
			dec := w.jsonEvents(strings.NewReader(stream))
			var decoded []map[string]string // each object's labels as decoded
			for range 4 {
				e, err := dec.Next()
				if err != nil {
					t.Fatal(err)
				}
				decoded = append(decoded, e.Object.Labels)
				w.apply(e, time.Now())
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
