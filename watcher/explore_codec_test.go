package watcher_test

import (
	"testing"

	"rawwatch/api/v1alpha1"
	"rawwatch/codec"
	"rawwatch/watcher"
)

// The explorer's schedules, the watchers decoding with the fast codec the
// controller runs (package codec): its frame reader under cut, corrupted
// and respelled streams; it breaks a line-framed stream at a newline
// inside a frame (codec.FrameReader).
func TestExplorerWithTheFastCodec(t *testing.T) {
	watcher.ExploreWith(t, codec.JSON[*v1alpha1.MyResource]{GVK: v1alpha1.GroupVersionKind}, true)
}
