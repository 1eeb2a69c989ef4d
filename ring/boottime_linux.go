package ring

import (
	"time"

	"golang.org/x/sys/unix"
)

// bootNow reads CLOCK_BOOTTIME: the monotonic clock plus the time the
// system spent suspended, never stepped (the zero time: unreadable).
func bootNow() time.Time {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return time.Time{}
	}
	return time.Unix(ts.Unix())
}
