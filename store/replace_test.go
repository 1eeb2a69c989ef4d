package store

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"rawwatch/api/v1alpha1"
)

// A relist that lists a key as another object (another UID) at the very
// resourceVersion the store holds for the old one replaces it, handing
// Deleted for the old and Added for the new: after a plain etcd restore to
// older data (no --bump-revision) resourceVersions are issued again, so a
// key can come back so.
func TestARelistReplacesAnotherObjectAtTheStoredResourceVersion(t *testing.T) {
	s := New[*v1alpha1.MyResource]()
	old := withUID(obj("ns", "obj-8", "67"), "uid-4")
	s.Upsert(old)

	r := s.NewReplacement()
	listed := withUID(obj("ns", "obj-8", "67"), "uid-48")
	r.Add(listed)
	deltas := r.Commit()

	got, _ := s.Get("ns/obj-8")
	if got.UID != "uid-48" || len(deltas) != 2 {
		t.Fatalf("a relist listed ns/obj-8 as UID uid-48 at resourceVersion 67 over the stored UID uid-4 at the same resourceVersion: the store holds UID %s and the relist handed %d deltas (want uid-48, and Deleted uid-4 then Added uid-48)", got.UID, len(deltas))
	}
}

// An undecodable list item of another UID than the stored object's means
// the key was deleted and created again while the loop was not watching:
// the relist deletes the stored object (Deleted, FinalStateUnknown; the key
// left out until an event brings the new object decodable). The same UID,
// or an unreadable one, keeps it.
func TestRelistOfAnUndecodableItemOfAnotherUIDDeletesTheStoredObject(t *testing.T) {
	s := New[*v1alpha1.MyResource]()
	for _, o := range []*v1alpha1.MyResource{obj("ns", "obj-1", "5"), obj("ns", "obj-2", "6"), obj("ns", "obj-3", "7")} {
		o.UID = types.UID("uid-old")
		s.Upsert(o)
	}
	r := s.NewReplacement()
	r.Keep("ns/obj-1", "uid-new") // deleted and re-created, the new one undecodable
	r.Keep("ns/obj-2", "uid-old") // the same object, undecodable
	r.Keep("ns/obj-3", "")        // undecodable, its UID unreadable: may be the same
	deltas := r.Commit()

	got, ok := s.Get("ns/obj-1")
	if ok || len(deltas) != 1 || deltas[0].Type != Deleted || deltas[0].Object.UID != "uid-old" || !deltas[0].FinalStateUnknown {
		var uid types.UID
		if ok {
			uid = got.UID
		}
		t.Fatalf("the relist listed ns/obj-1 undecodable as UID uid-new over the stored uid-old: the store holds %q, deltas %+v (want it gone, and Deleted uid-old marked FinalStateUnknown)", uid, deltas)
	}
	for _, key := range []string{"ns/obj-2", "ns/obj-3"} {
		if o, ok := s.Get(key); !ok || o.UID != "uid-old" {
			t.Errorf("%s (undecodable, the same or an unknown UID) not kept: %v %v", key, o, ok)
		}
	}
}
