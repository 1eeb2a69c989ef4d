package main

import (
	"strings"
	"testing"
	"time"
)

// The ring's durations are checked at start: a combination no ring can
// run on is refused with a message naming the flags, never defaulted or
// taken in silence.
func TestImpossibleShardingDurationsAreRefused(t *testing.T) {
	for _, c := range []struct {
		lease, renew time.Duration
		ok           bool
	}{
		{15 * time.Second, 2 * time.Second, true},
		{3 * time.Second, time.Second, true},
		{15 * time.Second, 6 * time.Second, false}, // renews too seldom: fences a renew period before it expires
		{0, 2 * time.Second, false},
		{-time.Second, 0, false},
		{15 * time.Second, 0, false},
		{900 * time.Millisecond, 300 * time.Millisecond, false}, // a Lease says whole seconds
		{time.Second, time.Millisecond, false},                  // a write and a list per member every millisecond
	} {
		o := options{}
		o.shards.LeaseDuration, o.shards.RenewPeriod, o.shards.Namespace = c.lease, c.renew, "ns"
		err := shardingConfig(&o)
		if (err == nil) != c.ok {
			t.Errorf("--sharding-lease-duration %v --sharding-renew-period %v: %v, want accepted: %v", c.lease, c.renew, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--sharding-") {
			t.Errorf("--sharding-lease-duration %v --sharding-renew-period %v: %q names no flag", c.lease, c.renew, err)
		}
	}
}
