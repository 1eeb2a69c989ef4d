package watcher

import (
	"testing"

	"rawwatch/api/v1alpha1"
)

// An object the watcher cannot decode is skipped, and what can still be
// read of its identity counts: its name and namespace (its key), its
// resourceVersion and UID, each read on its own, as a string or not at all.

// A DELETED event whose object cannot be decoded still deletes its key,
// whatever else of it is unreadable: here the resourceVersion is a number.
func TestAnUndecodableDeletedWhoseResourceVersionIsANumberDeletesItsKey(t *testing.T) {
	s := &answers{
		lists:   []string{page("5", item("a", `,"uid":"u-a","resourceVersion":"4"`, ``))},
		watches: []string{framed(Deleted, item("a", `,"uid":"u-a","resourceVersion":6`, ``))},
	}
	p := play(t, s, Options[*v1alpha1.MyResource]{})
	if _, ok := p.store.Get("ns/a"); ok {
		t.Error("ns/a is still in the store after its DELETED event")
	}
	if d := p.deleted("ns/a"); len(d) != 1 || !d[0].FinalStateUnknown {
		t.Errorf("Deleted deltas of ns/a: %+v; want one, FinalStateUnknown", d)
	}
}

// A listed item that cannot be decoded keeps the stored object of its key
// (a skipped item is not a deletion), whatever else of it is unreadable.
func TestAnUndecodableListItemKeepsItsKey(t *testing.T) {
	for name, metadata := range map[string]string{
		"a numeric uid":             `,"uid":7,"resourceVersion":"4"`,
		"a numeric resourceVersion": `,"uid":"u-a","resourceVersion":4`,
		"a wrong spec":              `,"uid":"u-a","resourceVersion":"4"},"spec":{"message":17`,
	} {
		t.Run(name, func(t *testing.T) {
			s := &answers{
				lists: []string{
					page("5", item("a", `,"uid":"u-a","resourceVersion":"4"`, ``)),
					page("7", item("a", metadata, ``)),
				},
				watches: []string{expired},
			}
			keptAfterTheRelist(t, s, "a relist that listed it undecodable")
		})
	}
}

// A listed item whose key cannot be read at all may be any stored object:
// the relist takes none of those it does not list for deleted.
func TestAListItemWithoutAReadableKeyTakesNothingForDeleted(t *testing.T) {
	s := &answers{
		lists: []string{
			page("5", item("a", `,"uid":"u-a","resourceVersion":"4"`, ``), item("b", `,"uid":"u-b","resourceVersion":"5"`, ``)),
			page("7", `{`+objHead+`,"metadata":{"name":7,"namespace":"ns","uid":"u-a","resourceVersion":"4"}}`,
				item("b", `,"uid":"u-b","resourceVersion":"5"`, ``)),
		},
		watches: []string{expired},
	}
	keptAfterTheRelist(t, s, "a relist with an item whose name it could not read")
}

// keptAfterTheRelist plays s, whose second list (after a 410) is the
// relist, and requires ns/a in the store after it, not reported deleted.
func keptAfterTheRelist(t *testing.T, s *answers, after string) {
	t.Helper()
	p := play(t, s, Options[*v1alpha1.MyResource]{})
	if s.listed != 2 {
		t.Fatalf("%d lists, want 2 (the 410 relists)", s.listed)
	}
	if _, ok := p.store.Get("ns/a"); !ok {
		t.Errorf("ns/a is gone from the store after %s", after)
	}
	if d := p.deleted("ns/a"); len(d) > 0 {
		t.Errorf("%s reported ns/a deleted: %+v", after, d)
	}
}

// An undecodable DELETED among a WatchList's initial events removes its
// key from them, as a live one deletes it from the store.
func TestAnUndecodableDeletedAmongInitialEventsRemovesItsKey(t *testing.T) {
	end := `{` + objHead + `,"metadata":{"resourceVersion":"8","annotations":{"k8s.io/initial-events-end":"true"}}}`
	s := &answers{
		lists: []string{page("5")},
		watches: []string{framed(Added, item("a", `,"uid":"u-a","resourceVersion":"6"`, ``)) +
			framed(Deleted, item("a", `,"uid":"u-a","resourceVersion":"7"`, `,"spec":{"message":17}`)) +
			framed(Bookmark, end)},
	}
	p := play(t, s, Options[*v1alpha1.MyResource]{WatchList: true})
	if s.listed != 0 || p.rv != "8" {
		t.Fatalf("%d lists, resourceVersion %s: want the initial events read to their end at 8", s.listed, p.rv)
	}
	if _, ok := p.store.Get("ns/a"); ok {
		t.Error("ns/a is in the store after the initial events deleted it")
	}
}

// A frame among a WatchList's initial events that is no object (a
// bookmark without a resourceVersion, an event of an unknown type) cannot
// be a listed item: skipping it takes nothing for listed, and an object the
// initial events lack is still Deleted when they end. (An unreadable item
// may be any stored object, and keeps them all: store.Replacement.Keep.)
func TestANonObjectFrameAmongInitialEventsKeepsNoDeletedObject(t *testing.T) {
	end := func(rv string) string {
		return framed(Bookmark, `{`+objHead+`,"metadata":{"resourceVersion":"`+rv+`","annotations":{"k8s.io/initial-events-end":"true"}}}`)
	}
	a := item("a", `,"uid":"u-a","resourceVersion":"4"`, ``)
	b := item("b", `,"uid":"u-b","resourceVersion":"5"`, ``)
	for name, frame := range map[string]string{
		"a bookmark without a resourceVersion": framed(Bookmark, `{`+objHead+`,"metadata":{}}`),
		"an unknown event type":                framed("SYNC", a),
	} {
		t.Run(name, func(t *testing.T) {
			s := &answers{
				lists: []string{page("5")},
				watches: []string{
					framed(Added, a) + framed(Added, b) + end("6") + expired, // then ns/b is deleted
					framed(Added, a) + frame + end("9"),
				},
			}
			p := play(t, s, Options[*v1alpha1.MyResource]{WatchList: true})
			if s.watched != 2 || p.rv != "9" {
				t.Fatalf("%d watches, resourceVersion %s: want the second WatchList read to its end at 9", s.watched, p.rv)
			}
			if _, ok := p.store.Get("ns/b"); ok || len(p.deleted("ns/b")) != 1 {
				t.Errorf("after initial events without ns/b and with %s: ns/b stored %v, deltas %s; want ns/b Deleted", name, ok, deltaUIDs(p.deltas))
			}
		})
	}
}
