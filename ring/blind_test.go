package ring

import (
	"testing"
	"time"

	"k8s.io/klog/v2"

	"rawwatch/shard"
)

// A member whose renewals succeed but whose lists fail (errors, or RBAC
// refusing the list) acts on no stale view: the others see it renew, and
// take its renewals for decisions made on a list that showed their own
// latest writes (a new owner stops watching a slot it withdrew once every
// claimer renewed twice since: Claims.Lingering). So it lets no slot go on
// a cover it read before its lists began to fail.
func TestAMemberThatCannotListLetsNoSlotGo(t *testing.T) {
	now := epoch
	var a *Member
	a, err := New(Config{Client: versionedClient(), Namespace: "ns", Ring: "r", Identity: "a",
		LeaseDuration: lease, RenewPeriod: renew, Now: func() time.Time { return now },
		OnClaims: func(Claims) {}, Busy: func() (_, _ shard.SlotSet) { return },
		Covers: func() Cover { return Cover{Slots: shard.All(), Since: 1, Synced: 1000} },
		Swept: func() Sweeps {
			s := Sweeps{Slots: a.claims.Sweep}
			for _, i := range s.Slots.List() {
				s.At[i] = 100
			}
			return s
		}})
	if err != nil {
		t.Fatal(err)
	}
	slot := shard.Assign([]string{"a", "n"})["n"][0]
	a.claims = Claims{Releasing: shard.SlotsOf(slot)}
	a.ownerOf[slot] = "n"
	n := "n"
	covers := map[string]string{AnnotationSlots: "", AnnotationPending: "", AnnotationCovers: "0-255",
		AnnotationCoversSince: "50", AnnotationSyncedTo: "200"}
	live(a, now, ringLease("n", &n, now, covers))
	if !a.Claims().Sweep.Has(slot) {
		t.Fatalf("n covers slot %d: a does not sweep it (%+v)", slot, a.Claims())
	}
	// a's lists fail from here on; its renewals go through.
	for range 3 {
		now = now.Add(renew)
		a.setRenewed(a.Now())
		a.lookOK = false
		a.update(klog.Background())
		if c := a.Claims(); !c.Releasing.Has(slot) || c.Given.Has(slot) {
			t.Fatalf("a's lists failing: a let slot %d go to n on the cover of a list made %s ago (%+v)", slot, now.Sub(epoch), c)
		}
	}
}
