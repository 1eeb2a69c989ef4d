package compare

import (
	"os"
	"runtime"
	"runtime/debug"
	"testing"
)

// The high-water mark sees memory that is gone by the time anyone looks,
// and resetPeakRSS forgets it.
func TestPeakRSS(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux's")
	}
	pid := os.Getpid()
	before, err := peakRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	const size = 256 << 20
	b := make([]byte, size)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1 // touch every page: resident now
	}
	peak, err := peakRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	if peak < before+size/2 {
		t.Fatalf("high-water mark %d MiB after touching %d MiB (it was %d MiB)", peak>>20, size>>20, before>>20)
	}
	runtime.KeepAlive(b)
	b = nil
	runtime.GC()
	debug.FreeOSMemory()
	if err := resetPeakRSS(pid); err != nil {
		t.Fatal(err)
	}
	after, err := peakRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	if after > peak-size/2 {
		t.Fatalf("high-water mark %d MiB after the reset; it was %d MiB with %d MiB more resident", after>>20, peak>>20, size>>20)
	}
	if _, err := peakRSS(1 << 30); err == nil {
		t.Fatal("a pid that does not exist has a high-water mark")
	}
}
