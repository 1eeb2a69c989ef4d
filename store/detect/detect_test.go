package detect

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/api/v1alpha1"
)

// An object that left the store is compared with its copy at every compare
// of all for Retain at least, and let go within twice Retain: a detector
// on for days holds what left in the last minutes only.
func TestWhatLeftIsComparedForRetainAndThenLetGo(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d := New[*v1alpha1.MyResource](true)
	d.now, d.rotated = func() time.Time { return now }, now
	var found []error
	d.failed = func(err error) { found = append(found, err) }
	items := map[string]*v1alpha1.MyResource{}
	written := 0
	write := func() { // a new object: nothing leaves
		written++
		name := fmt.Sprint("o-", written)
		o := &v1alpha1.MyResource{ObjectMeta: metav1.ObjectMeta{Name: name}}
		d.Stored(name, o, items)
		items[name] = o
		d.Wrote(items)
	}
	left := &v1alpha1.MyResource{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"app": "a"}}}
	d.Stored("a", left, items)
	items["a"] = left
	d.Wrote(items)
	d.Removed("a", left)
	delete(items, "a")
	d.Wrote(items)

	now = now.Add(Retain - time.Second)
	for range 200 {
		write()
	}
	left.Labels["edited"] = "late"
	if err := d.CheckAll(items); err == nil {
		t.Fatalf("an object edited %v after it left: CheckAll found nothing", Retain-time.Second)
	}
	delete(left.Labels, "edited")

	for range 3 { // two rotations and more
		now = now.Add(Retain)
		for range 100 {
			write()
		}
	}
	if n := len(d.gone) + len(d.retained); n != 0 {
		t.Errorf("%v after the last object left, the detector still holds %d of them", 3*Retain, n)
	}
	if len(found) != 0 {
		t.Errorf("no edit but the one undone: the detector reported %v", found)
	}
}
