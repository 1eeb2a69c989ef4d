package watcher

import (
	"fmt"
	"testing"

	"rawwatch/api/v1alpha1"
	"rawwatch/store"
)

// A key is one object only while its UID stays: a key that comes back with
// another UID was deleted and made again while the watcher was not looking,
// and the handler hears of two objects, the old one Deleted (its final
// state unknown), the new one Added, never an update of one into the other;
// on a watch event as on a relist.
func TestAKeyBackWithAnotherUIDIsADeletionAndAnAddition(t *testing.T) {
	listed := page("5", item("a", `,"uid":"u-a","resourceVersion":"4"`, ``))
	again := item("a", `,"uid":"u-a2","resourceVersion":"6"`, ``)
	for name, c := range map[string]struct {
		s    *answers
		want string
	}{
		"MODIFIED": {&answers{lists: []string{listed}, watches: []string{framed(Modified, again)}},
			"[Added u-a false Deleted u-a true Added u-a2 false]"},
		"ADDED": {&answers{lists: []string{listed}, watches: []string{framed(Added, again)}},
			"[Added u-a false Deleted u-a true Added u-a2 false]"},
		"DELETED": {&answers{lists: []string{listed}, watches: []string{framed(Deleted, again)}},
			"[Added u-a false Deleted u-a true]"},
		"a relist": {&answers{lists: []string{listed, page("7", again)}, watches: []string{expired}},
			"[Added u-a false Deleted u-a true Added u-a2 false]"},
	} {
		t.Run(name, func(t *testing.T) {
			p := play(t, c.s, Options[*v1alpha1.MyResource]{})
			if got := deltaUIDs(p.deltas); got != c.want {
				t.Errorf("deltas (type, UID, final state unknown): %s, want %s", got, c.want)
			}
		})
	}
}

func deltaUIDs(ds []store.Delta[*v1alpha1.MyResource]) string {
	var out []string
	for _, d := range ds {
		out = append(out, fmt.Sprint(d.Type, " ", d.Object.UID, " ", d.FinalStateUnknown))
	}
	return fmt.Sprint(out)
}

// An ADDED or MODIFIED that cannot be decoded but whose metadata names
// another UID than the stored object's says the stored object is gone from
// the server (its key holds another object now): the stored one is Deleted,
// its final state unknown, and not kept as if current, as a relist treats
// an undecodable item of another UID (store.Replacement.Keep).
func TestAnUndecodableEventOfAnotherUIDDeletesTheStoredObject(t *testing.T) {
	listed := page("5", item("a", `,"uid":"u-a","resourceVersion":"4"`, ``))
	again := item("a", `,"uid":"u-a2","resourceVersion":"6"`, `,"spec":{"message":17}`) // undecodable
	for _, typ := range []string{Added, Modified} {
		t.Run(typ, func(t *testing.T) {
			s := &answers{lists: []string{listed}, watches: []string{framed(typ, again)}}
			p := play(t, s, Options[*v1alpha1.MyResource]{})
			if got, ok := p.store.Get("ns/a"); ok && got.UID == "u-a" {
				t.Errorf("after an undecodable %s of ns/a under UID u-a2, the store still holds u-a as current; deltas %s", typ, deltaUIDs(p.deltas))
			}
			if d := p.deleted("ns/a"); len(d) != 1 || d[0].Object.UID != "u-a" || !d[0].FinalStateUnknown {
				t.Errorf("Deleted deltas of ns/a: %s, want u-a Deleted (final state unknown)", deltaUIDs(d))
			}
		})
	}
	// The relist does so already (the same item, listed).
	s := &answers{lists: []string{listed, page("7", again)}, watches: []string{expired}}
	if p := play(t, s, Options[*v1alpha1.MyResource]{}); len(p.deleted("ns/a")) != 1 {
		t.Errorf("the relist kept u-a: %s", deltaUIDs(p.deltas))
	}
}
