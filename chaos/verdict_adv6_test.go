package chaos

import (
	"testing"
	"time"
)

// The ring forming: nobody claimed the slot at the deletion; b, watching
// it, claimed it first at 103 s and fenced itself at 110 s. The fence
// excuses the deletion only if nobody could handle it after: not when a
// replica that had the object (its store held it: its watch, or the relist
// of a takeover, reports it gone) works the slot again after that fence,
// without a fence or a kill ending it, heard of the deletion or not.
func TestFormingRingFenceIsNoExcuseWhenAHolderWorksTheSlotAfter(t *testing.T) {
	for _, c := range []struct {
		name  string
		scene *scene
		want  string
	}{
		// b had the object, fenced, then claimed the slot again at 115 s
		// and worked it to the end of the run: its watch (or its relist)
		// never reported the deletion.
		{"its first claimant had it, fenced, and worked the slot again", newScene("a", "b").list("b", 90*time.Second, 140).knewAt("b", 95*time.Second).
			claims("b", 103*time.Second, true, false, 140).claims("b", 110*time.Second, false, true, 140).claims("b", 115*time.Second, true, false, 200), "lost"},
		// a, which had the object as b did, claimed the slot right after b's fence
		// and worked it to the end of the run.
		{"another that had it claimed the slot right after the fence", newScene("a", "b").list("b", 90*time.Second, 140).list("a", 90*time.Second, 140).knewAt("a", 95*time.Second).knewAt("b", 95*time.Second).
			claims("b", 103*time.Second, true, false, 140).claims("b", 110*time.Second, false, true, 140).claims("a", 111*time.Second, true, false, 200), "lost"},
		// Control: the same, a never had the object (its takeover list came
		// after the deletion): the fence is the excuse.
		{"another that never had it claimed the slot after the fence", newScene("a", "b").list("b", 90*time.Second, 140).
			claims("b", 103*time.Second, true, false, 140).claims("b", 110*time.Second, false, true, 140).list("a", 111*time.Second, 200).claims("a", 111*time.Second, true, false, 200), "fenced"},
	} {
		if got := excused(c.scene.verdict()); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
