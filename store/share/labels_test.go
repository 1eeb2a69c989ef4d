package share

import "testing"

// Two label sets of one hash are not shared: the second keeps its own map.
func TestLabelsOfOneHashButUnequalAreNotShared(t *testing.T) {
	var s Sets
	first := map[string]string{"app": "x"}
	s.Share(first, true)
	other := map[string]string{"app": "y"}
	s.sets[s.hash(other)] = first // a collision, as a hash may have
	if got := s.Share(other, true); !SameMap(got, other) {
		t.Fatalf("Share gave %v for %v", got, other)
	}
}
