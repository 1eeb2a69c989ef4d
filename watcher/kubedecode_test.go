package watcher

import (
	"slices"
	"strings"
	"testing"

	"rawwatch/api/v1alpha1"
)

// The watcher reads what Kubernetes reads: a watch frame's envelope as
// metav1.WatchEvent and every object as sigs.k8s.io/json decodes them (keys
// matched case-sensitively; of a key given twice, the last), a LIST page as
// one JSON value, an ERROR as the Status it carries.

// A key of the envelope in another case is not the event's type or object,
// and an "object" given twice is the last one that is not null
// (runtime.RawExtension keeps what it had for a null): on every route a
// frame takes (the usual frame, read in one pass; the envelope walked; an
// escaped key, read the plain way).
func TestTheEnvelopeIsReadAsKubernetesReadsIt(t *testing.T) {
	a6 := item("a", `,"uid":"u-a","resourceVersion":"6"`, `,"spec":{"message":"six"}`)
	b := item("b", `,"uid":"u-b","resourceVersion":"6"`, ``)
	for name, f := range map[string]string{
		"Type after":             `{"type":"MODIFIED","object":` + a6 + `,"Type":"DELETED"}`,
		"TYPE before":            `{"TYPE":"DELETED","type":"MODIFIED","object":` + a6 + `}`,
		"Type after, escaped":    `{"typ\u0065":"MODIFIED","object":` + a6 + `,"Type":"DELETED"}`,
		"Object after":           `{"type":"MODIFIED","object":` + a6 + `,"Object":` + b + `}`,
		"Object after, escaped":  `{"typ\u0065":"MODIFIED","object":` + a6 + `,"Object":` + b + `}`,
		"object null after":      `{"type":"MODIFIED","object":` + a6 + `,"object":null}`,
		"object null, escaped":   `{"typ\u0065":"MODIFIED","object":` + a6 + `,"object":null}`,
		"type twice, last wins":  `{"type":"DELETED","object":` + a6 + `,"type":"MODIFIED"}`,
		"object twice, last one": `{"type":"MODIFIED","object":` + b + `,"object":` + a6 + `}`,
	} {
		t.Run(name, func(t *testing.T) {
			s := &answers{
				lists:   []string{page("5", item("a", `,"uid":"u-a","resourceVersion":"4"`, ``))},
				watches: []string{f + "\n"},
			}
			p := play(t, s, Options[*v1alpha1.MyResource]{})
			got, ok := p.store.Get("ns/a")
			if !ok || got.ResourceVersion != "6" || got.Spec.Message != "six" {
				t.Errorf("ns/a after a MODIFIED at resourceVersion 6: %v (in the store: %v)", got, ok)
			}
			if _, ok := p.store.Get("ns/b"); ok || len(p.deleted("ns/a")) > 0 {
				t.Errorf("the frame was read as another event: ns/b stored %v, ns/a deleted %v", ok, p.deleted("ns/a"))
			}
		})
	}
}

// A bookmark's resourceVersion is its metadata's "resourceVersion", not a
// key in another case.
func TestABookmarksResourceVersionIsReadCaseSensitively(t *testing.T) {
	s := &answers{
		lists:   []string{page("5")},
		watches: []string{framed(Bookmark, `{`+objHead+`,"metadata":{"resourceVersion":"10","ResourceVersion":"9"}}`)},
	}
	if p := play(t, s, Options[*v1alpha1.MyResource]{}); p.rv != "10" {
		t.Errorf("resourceVersion after the bookmark: %s, want 10", p.rv)
	}
}

// A LIST page's metadata is read case-sensitively: its "resourceVersion"
// and "continue", not keys in another case.
func TestAListPagesMetadataIsReadCaseSensitively(t *testing.T) {
	first := `{"metadata":{"resourceVersion":"10","ResourceVersion":"9","Continue":"next"},"items":[` + item("a", `,"uid":"u-a","resourceVersion":"4"`, ``) + `]}`
	s := &answers{lists: []string{first, page("9", item("b", `,"uid":"u-b","resourceVersion":"3"`, ``))}}
	p := play(t, s, Options[*v1alpha1.MyResource]{})
	if s.listed != 1 || p.rv != "10" || p.store.Len() != 1 {
		t.Errorf("%d pages read, resourceVersion %s, %d objects stored; want one page, 10, ns/a alone", s.listed, p.rv, p.store.Len())
	}
}

// A LIST page with "items" twice holds the last array (encoding/json, and
// so Kubernetes, keeps the last value of a key given twice).
func TestAListPageWithItemsTwiceHoldsTheLastArray(t *testing.T) {
	body := `{"metadata":{"resourceVersion":"10"},"items":[` + item("a", `,"uid":"u-a","resourceVersion":"4"`, ``) +
		`],"items":[` + item("b", `,"uid":"u-b","resourceVersion":"5"`, ``) + `]}`
	p := play(t, &answers{lists: []string{body}}, Options[*v1alpha1.MyResource]{})
	if keys := p.store.Keys(); !slices.Equal(keys, []string{"ns/b"}) {
		t.Errorf("stored after the list: %v, want [ns/b]", keys)
	}
}

// A LIST body is one JSON value: anything after it but white space fails
// the list, as it fails Kubernetes' decoding.
func TestDataAfterAListBodyFailsTheList(t *testing.T) {
	for _, after := range []string{"x", "{}", `{"metadata":{"resourceVersion":"11"}}`, "]"} {
		t.Run(after, func(t *testing.T) {
			body := page("10", item("a", `,"uid":"u-a","resourceVersion":"4"`, ``)) + "\n" + after
			p := play(t, &answers{lists: []string{body}}, Options[*v1alpha1.MyResource]{})
			if p.store.Len() != 0 || len(p.deltas) != 0 {
				t.Errorf("a list with %q after its body filled the store: %v", after, p.store.Keys())
			}
		})
	}
	p := play(t, &answers{lists: []string{page("10", item("a", `,"uid":"u-a","resourceVersion":"4"`, ``)) + " \r\n\t"}}, Options[*v1alpha1.MyResource]{})
	if p.store.Len() != 1 {
		t.Errorf("a list followed by white space failed")
	}
}

// An ERROR frame carries a Status: what it says counts, whichever of its
// fields it sets (client-go takes it as apierrors.FromObject does). A 410
// without "status" after an event still relists (an ERROR of another kind
// after progress re-watches from there first).
func TestAnErrorStatusIsClassedByWhatItSays(t *testing.T) {
	for name, status := range map[string]string{
		"code and reason":  `{"kind":"Status","apiVersion":"v1","code":410,"reason":"Expired","message":"the resourceVersion is gone"}`,
		"code only":        `{"kind":"Status","apiVersion":"v1","code":410,"message":"gone"}`,
		"reason only":      `{"kind":"Status","apiVersion":"v1","reason":"Expired"}`,
		"the usual status": strings.TrimSuffix(strings.TrimPrefix(expired, `{"type":"ERROR","object":`), "}\n"),
	} {
		t.Run(name, func(t *testing.T) {
			s := &answers{lists: []string{page("5")},
				watches: []string{framed(Added, item("a", `,"uid":"u-a","resourceVersion":"6"`, ``)) + framed(Error, status)}}
			p := play(t, s, Options[*v1alpha1.MyResource]{})
			if s.listed != 2 {
				t.Errorf("after an ERROR %s: %d lists, want a relist; %+v", status, s.listed, p.states[len(p.states)-2])
			}
		})
	}
}

// A frame that is not JSON ends the stream, wherever the damage is:
// managedFields too (the fast path cuts them out of the bytes unread, for
// an object its own decoder declines), as Kubernetes' decoding fails the
// whole frame. A value of the wrong type in them is an object skipped, as
// anywhere else in the object.
func TestManagedFieldsAreReadAsTheRestOfTheObject(t *testing.T) {
	for name, c := range map[string]struct {
		entry  string
		broken bool
	}{
		"tru":            {`"x":tru`, true},
		"01":             {`"x":01`, true},
		"1e":             {`"x":1e`, true},
		"in fieldsV1":    {`"fieldsV1":{"f:spec":nul}`, true},
		"manager 5":      {`"manager":5`, false},
		"operation true": {`"operation":true`, false},
		"time twice":     {`"time":5,"time":"2026-12-01T10:00:00Z"`, false},
	} {
		t.Run(name, func(t *testing.T) {
			mf := `,"managedFields":[{"manager":"m","time":"2026-12-01T10:00:00Z"},{` + c.entry + `}]`
			s := &answers{
				lists: []string{page("5", item("a", `,"uid":"u-a","resourceVersion":"4"`, ``))},
				watches: []string{framed(Modified, item("a", `,"uid":"u-a","resourceVersion":"6"`+mf, `,"spec":{"message":"six"}`)) +
					framed(Added, item("b", `,"uid":"u-b","resourceVersion":"7"`, ``))},
			}
			p := play(t, s, Options[*v1alpha1.MyResource]{})
			if a, _ := p.store.Get("ns/a"); a == nil || a.ResourceVersion != "4" {
				t.Errorf("ns/a taken from a frame with %s in managedFields: %v", c.entry, a)
			}
			if _, ok := p.store.Get("ns/b"); ok == c.broken {
				t.Errorf("with %s in managedFields: the frame after it applied %v; want the stream broken %v", c.entry, ok, c.broken)
			}
		})
	}
}
