package compare

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
)

// peakHelperEnv makes the test binary a helper process whose memory
// TestPeakRSS controls: the test process itself holds whatever the
// package's other tests left, and their goroutines may still be working.
const peakHelperEnv = "COMPARE_PEAK_RSS_HELPER"

const peakHelperSize = 256 << 20

func init() {
	if os.Getenv(peakHelperEnv) == "" {
		return
	}
	// Touch every page of 256 MiB (resident now), say so, wait; unmap it,
	// say so, wait. The memory is mapped here, not the Go heap's: unmapped,
	// it is gone at once, and the race detector keeps no shadow of it (of
	// a heap slice it did, 256 MiB more, and kept part of it after the
	// slice was freed: the test failed under -race beside the package's
	// other tests, 446 MiB after the reset against a 571 MiB peak).
	in := bufio.NewScanner(os.Stdin)
	b, err := syscall.Mmap(-1, 0, peakHelperSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	fmt.Println("touched")
	in.Scan()
	if err := syscall.Munmap(b); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println("freed")
	in.Scan()
	os.Exit(0)
}

// The high-water mark sees memory that is gone by the time anyone looks,
// and resetPeakRSS forgets it.
func TestPeakRSS(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux's")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), peakHelperEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	out := bufio.NewScanner(stdout)
	expect := func(line string) {
		t.Helper()
		if !out.Scan() || out.Text() != line {
			t.Fatalf("helper said %q (%v), want %q", out.Text(), out.Err(), line)
		}
	}
	pid := cmd.Process.Pid

	expect("touched")
	peak, err := peakRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	if peak < peakHelperSize {
		t.Fatalf("high-water mark %d MiB after touching %d MiB", peak>>20, peakHelperSize>>20)
	}
	fmt.Fprintln(stdin, "free")
	expect("freed")
	if err := resetPeakRSS(pid); err != nil {
		t.Fatal(err)
	}
	after, err := peakRSS(pid)
	if err != nil {
		t.Fatal(err)
	}
	if after > peak-peakHelperSize/2 {
		t.Fatalf("high-water mark %d MiB after the reset; it was %d MiB with %d MiB more resident", after>>20, peak>>20, peakHelperSize>>20)
	}
	if _, err := peakRSS(1 << 30); err == nil {
		t.Fatal("a pid that does not exist has a high-water mark")
	}
}
