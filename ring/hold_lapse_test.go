package ring

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"rawwatch/shard"
)

// How long a hold stands: a holder that cannot cover its slot does not
// keep it for good (holds_claims_test.go), and a fence is no such stretch.

// o withdrew slot s (a copy of its Lease claimed every slot) and holds a
// deletion D of it; n joins, s its share. Then the API server is down
// longer than HandoffTimeout: both fence, and o's watch covers nothing
// while fenced. When it comes back, o's hold must stand (it was nobody's
// holder while fenced, not a holder that never covers): o claims s and
// handles D before n works s.
func TestAHoldOutlastsAnOutageLongerThanHandoffTimeout(t *testing.T) {
	client := versionedClient()
	down := false
	client.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if down {
			return true, nil, errors.New("the API server is down")
		}
		return false, nil, nil
	})
	now := epoch
	clock := func() time.Time { return now }
	s := firstSlot(t, "no slot of n's beside o", func(i int) bool { return owns("n", i, "n", "o") })
	holding := false
	ctx := context.Background()
	tick := func(m *Member) { stepMember(ctx, m, &now) }
	o := coveringMember(t, client, "o", clock, holdsIf(&holding, s))
	withdrawnByACopy(t, client, o, tick, s)
	holding = true // D
	n := coveringMember(t, client, "n", clock, func() shard.SlotSet { return shard.SlotSet{} })
	outage := o.cfg.HandoffTimeout + 10*time.Second
	for i := 0; ; i++ {
		elapsed := time.Duration(i) * 200 * time.Millisecond
		down = elapsed >= 4*time.Second && elapsed < 4*time.Second+outage
		tick(n)
		tick(o)
		oc, nc := o.Claims(), n.Claims()
		if oc.Working.Union(oc.Releasing).Has(s) {
			t.Logf("o claims slot %d %v after the copy, %v after the outage", s, elapsed, elapsed-4*time.Second-outage)
			return
		}
		if nc.Working.Has(s) {
			t.Fatalf("n works slot %d %v after the copy (the outage %v) while o holds D of it, which n never heard of: o holding %v",
				s, elapsed, outage, oc.Holding.Has(s))
		}
		if elapsed > outage+60*time.Second {
			t.Fatalf("slot %d claimed by neither %v after the copy: o %+v", s, elapsed, oc)
		}
	}
}
