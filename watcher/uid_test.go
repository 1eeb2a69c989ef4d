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
