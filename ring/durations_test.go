package ring

import (
	"math"
	"strings"
	"testing"
	"time"
)

// A ring runs only on durations a Lease can say and every wait derived from
// them can count: a lease duration of 2³¹ s does not fit leaseDurationSeconds
// (int32), so it is refused at start with the bound, never written wrapped.
func TestCheckDurationsRefusesWhatALeaseCannotSay(t *testing.T) {
	for _, c := range []struct {
		lease, renew time.Duration
		want         string // "" accepted; else in the error
	}{
		{15 * time.Second, 2 * time.Second, ""},
		{MaxLeaseDuration, MaxLeaseDuration / 3, ""},
		{999 * time.Millisecond, 100 * time.Millisecond, "at least"},
		{time.Second, 99 * time.Millisecond, "at least"},
		{3 * time.Second, 1001 * time.Millisecond, "at most a third"},
		{MaxLeaseDuration + time.Second, time.Second, "at most"},
		{time.Duration(math.MaxInt32+1) * time.Second, time.Second, "at most"},
		{time.Duration(math.MaxInt64), time.Second, "at most"},
	} {
		err := CheckDurations(c.lease, c.renew)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("lease %v, renew %v: refused (%v), want accepted", c.lease, c.renew, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("lease %v, renew %v: %v, want an error saying %q", c.lease, c.renew, err, c.want)
		}
	}
	// What a ring on the longest lease writes and waits fits its types.
	if s := written(MaxLeaseDuration) / time.Second; s > math.MaxInt32 {
		t.Errorf("leaseDurationSeconds of the longest lease, %d, overflows int32", s)
	}
	if w := CollectWithin(MaxLeaseDuration, MaxLeaseDuration/3); w <= 0 {
		t.Errorf("CollectWithin of the longest lease overflows: %v", w)
	}
}
