package watcher

import (
	"testing"

	"rawwatch/api/v1alpha1"
)

// ExploreWith runs the explorer's schedules with c (lineFramed: see
// exploreAll): for explore_codec_test.go, whose package (watcher_test) may
// import package codec.
func ExploreWith(t *testing.T, c Codec[*v1alpha1.MyResource], lineFramed bool) {
	exploreAll(t, c, lineFramed)
}
