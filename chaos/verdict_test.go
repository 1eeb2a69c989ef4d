package chaos

import (
	"testing"

	"rawwatch/watcher"
)

// The request bound is package watcher's: 45 a minute with its default
// backoff. Compressed ×15, the backoff climbs to its cap in under 2 s and
// waits at least 1 s there, and may reset after 8 s: many more.
func TestRequestBoundFollowsTheBackoff(t *testing.T) {
	if n := requestBound(watcher.DefaultBackoff); n != 45 {
		t.Errorf("default backoff: %d, want 45", n)
	}
	compressed := Config{Compress: 15}.Watch().Backoff
	if n := requestBound(compressed); n != 325 {
		t.Errorf("backoff compressed ×15 (%+v): %d, want 325", compressed, n)
	}
}
