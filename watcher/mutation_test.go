package watcher

import (
	"fmt"
	"strings"
	"testing"

	"rawwatch/api/v1alpha1"
	"rawwatch/store"
)

// A handler that changes a cached object in place is a bug the watcher
// cannot prevent (client-go's informers share their objects the same way).
// It must stay that object's: by default the store shares no labels map
// between objects, so another object with the same labels, and one decoded
// after it, keep the labels their JSON says. And it is reported: the
// mutation detector (on in every test) finds the edited object.
func TestAHandlerEditingLabelsInPlaceChangesNoOtherObject(t *testing.T) {
	p := play(t, labelledPair(), Options[*v1alpha1.MyResource]{Handler: editLabelsOf("ns/a")})
	if b, _ := p.store.Get("ns/b"); b == nil || fmt.Sprint(b.Labels) != "map[app:x]" {
		t.Errorf("ns/b's labels after a handler edited ns/a's in place: %v, want map[app:x]", b.Labels)
	}
	if err := p.store.CheckMutations(); err == nil || !strings.Contains(err.Error(), "ns/a was changed in place") {
		t.Errorf("the mutation detector says %v; want ns/a changed in place", err)
	}
}

// With store.Share the same edit changes every object holding those labels,
// ns/b decoded after it included: the detector reports it.
func TestTheMutationDetectorReportsAnEditOfSharedLabels(t *testing.T) {
	p := play(t, labelledPair(), Options[*v1alpha1.MyResource]{Handler: editLabelsOf("ns/a")},
		func(s *store.Store[*v1alpha1.MyResource]) { s.Share() })
	if err := p.store.CheckMutations(); err == nil || !strings.Contains(err.Error(), "ns/a was changed in place") {
		t.Errorf("the mutation detector says %v; want ns/a changed in place", err)
	}
}

// labelledPair lists nothing and streams ns/a, then ns/b, both labelled app=x.
func labelledPair() *answers {
	return &answers{
		lists: []string{page("5")},
		watches: []string{framed(Added, item("a", `,"uid":"u-a","resourceVersion":"6","labels":{"app":"x"}`, ``)) +
			framed(Added, item("b", `,"uid":"u-b","resourceVersion":"7","labels":{"app":"x"}`, ``))},
	}
}

// editLabelsOf is a handler with a bug: it adds a label to key's cached
// object in place, without a DeepCopy.
func editLabelsOf(key string) func(store.Delta[*v1alpha1.MyResource]) {
	return func(d store.Delta[*v1alpha1.MyResource]) {
		if d.Key == key {
			d.Object.Labels["edited"] = "in place"
		}
	}
}

// With store.Share, the objects a handler gets that leave the store (a
// Deleted delta's final state, an Updated delta's Old) hold labels maps
// that objects decoded after them may be given too: an edit of those is
// reported as well, not carried silently into the next object.
func TestTheMutationDetectorReportsAnEditOfTheLabelsOfObjectsThatLeftTheStore(t *testing.T) {
	for name, c := range map[string]struct {
		second string // ns/a's second event, after its ADDED with app=x
		edit   func(store.Delta[*v1alpha1.MyResource])
	}{
		"a Deleted object": {
			framed(Deleted, item("a", `,"uid":"u-a","resourceVersion":"7","labels":{"app":"x"}`, ``)),
			func(d store.Delta[*v1alpha1.MyResource]) {
				if d.Type == store.Deleted {
					d.Object.Labels["edited"] = "in place"
				}
			},
		},
		"an Update's Old object": {
			framed(Modified, item("a", `,"uid":"u-a","resourceVersion":"7"`, ``)),
			func(d store.Delta[*v1alpha1.MyResource]) {
				if d.Type == store.Updated {
					d.Old.Labels["edited"] = "in place"
				}
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := &answers{
				lists: []string{page("5")},
				watches: []string{framed(Added, item("a", `,"uid":"u-a","resourceVersion":"6","labels":{"app":"x"}`, ``)) +
					c.second + framed(Added, item("b", `,"uid":"u-b","resourceVersion":"8","labels":{"app":"x"}`, ``))},
			}
			p := play(t, s, Options[*v1alpha1.MyResource]{Handler: c.edit},
				func(s *store.Store[*v1alpha1.MyResource]) { s.Share() })
			if err := p.store.CheckMutations(); err == nil || !strings.Contains(err.Error(), "changed in place") {
				b, _ := p.store.Get("ns/b")
				t.Errorf("the mutation detector says %v; want the edit reported (ns/b's labels: %v)", err, b.Labels)
			}
		})
	}
}
