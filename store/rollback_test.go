package store

import (
	"testing"

	"rawwatch/api/v1alpha1"
)

// After an etcd restore without --bump-revision the server gives out
// resourceVersions again, to other content: an equal resourceVersion (and
// UID) does not make an object the one stored. A relist and an event take
// an object whose content differs from the stored one's; an equal one (a
// duplicate delivery, an unchanged listed object) changes nothing.

func TestARelistTakesAnObjectOfTheStoredResourceVersionWithOtherContent(t *testing.T) {
	s := New[*v1alpha1.MyResource]()
	before := obj("ns", "x", "101")
	before.Spec.Message = "written before the restore"
	s.Upsert(before)
	same := obj("ns", "y", "90")
	s.Upsert(same)
	r := s.NewReplacement()
	again := obj("ns", "x", "101")
	again.Spec.Message = "written again after it"
	r.Add(again)
	r.Add(obj("ns", "y", "90"))
	deltas := r.Commit()
	if got, _ := s.Get("ns/x"); got.Spec.Message != "written again after it" || len(deltas) != 1 || deltas[0].Type != Updated || deltas[0].Old != before {
		t.Errorf("a relist listed ns/x at the stored resourceVersion 101 with other content: the store holds %q, deltas %+v; want the listed content, one Updated delta", got.Spec.Message, deltas)
	}
	if got, _ := s.Get("ns/y"); got != same {
		t.Error("a relist replaced an unchanged object (same resourceVersion, same content) with its listed copy")
	}
}

func TestAnEventOfTheStoredResourceVersionWithOtherContentIsAChange(t *testing.T) {
	s := New[*v1alpha1.MyResource]()
	s.Upsert(obj("ns", "x", "101"))
	if _, changed, _ := s.Upsert(obj("ns", "x", "101")); changed {
		t.Error("a duplicate delivery (same resourceVersion, same content) was taken as a change")
	}
	again := obj("ns", "x", "101")
	again.Spec.Message = "written again after a restore"
	d, changed, _ := s.Upsert(again)
	if got, _ := s.Get("ns/x"); !changed || d.Type != Updated || got.Spec.Message != again.Spec.Message {
		t.Errorf("an event of ns/x at the stored resourceVersion with other content: changed %v, delta %s, stored %q", changed, d.Type, got.Spec.Message)
	}
}
