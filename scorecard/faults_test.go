package scorecard

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"rawwatch/faultproxy"
)

// A fault's Recorded are the recordings its answers are held to: each is
// one the proxy replays (faultproxy.Replays, every one compared with the
// proxy's answer by faultproxy's tests). The recordings that show what
// kube-apiserver answers instead, or the real server making the fault
// itself, are its Contrast. Both are files of testdata/wire.
func TestRecordedAreOnlyTheRecordingsTheProxyReplays(t *testing.T) {
	var replayed []string
	for _, files := range faultproxy.Replays {
		replayed = append(replayed, files...)
	}
	for _, f := range Faults {
		for _, file := range f.Recorded {
			if !slices.Contains(replayed, file) {
				t.Errorf("%s: %s is not a recording the proxy replays (faultproxy.Replays): a contrast, not what its answers are held to", f.Name, file)
			}
		}
		for _, file := range append(slices.Clone(f.Recorded), f.Contrast...) {
			if _, err := os.Stat(filepath.Join("..", "testdata", "wire", file)); err != nil {
				t.Errorf("%s: %v", f.Name, err)
			}
		}
	}
}
