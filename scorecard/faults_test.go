package scorecard

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"rawwatch/faultproxy"
	"rawwatch/watcher"
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

// freeze outlasts the raw watcher's watchdog, and the recovery window after
// it ends before client-go's shortest watch timeout would end a frozen
// stream: what the cells show is the watchdog, or its absence.
func TestFreezeOutlastsTheWatchdogNotClientGosWatchTimeout(t *testing.T) {
	const clientGoMinWatchTimeout = 5 * time.Minute // tools/cache's defaultMinWatchTimeout
	if FreezeFor <= watcher.DefaultSilenceLimit {
		t.Errorf("freeze lasts %v, not past the silence limit %v", FreezeFor, watcher.DefaultSilenceLimit)
	}
	if FreezeFor+DefaultRecover >= clientGoMinWatchTimeout {
		t.Errorf("freeze (%v) and the recovery window (%v) reach client-go's watch timeout (%v)", FreezeFor, DefaultRecover, clientGoMinWatchTimeout)
	}
}
