package compare

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// The kernel keeps a process's peak resident set, its high-water mark
// (VmHWM in /proc/PID/status). Unlike a peak of samples it misses nothing:
// in a relist storm the apiserver is so busy that its /metrics goes
// unanswered for tens of seconds, which is when its memory peaks. (RSS
// falls back slowly, so the sampled peak was seldom far off; the kernel's
// settles it.) Linux only, and only for an apiserver this process started
// (it needs the pid).

// peakRSS is the process's resident-set high-water mark in bytes: since it
// started, or since resetPeakRSS.
func peakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmHWM:")); ok {
			f := bytes.Fields(v) // "123456 kB"
			if len(f) != 2 || string(f[1]) != "kB" {
				return 0, fmt.Errorf("/proc/%d/status: VmHWM:%s", pid, v)
			}
			kb, err := strconv.ParseInt(string(f[0]), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
}

// resetPeakRSS sets the process's high-water mark back to its resident set
// now (writing 5 to /proc/PID/clear_refs; Linux 4.0 and later).
func resetPeakRSS(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// highWater is the high-water mark (bytes) of the process pid gives (nil,
// or a pid of 0: none), 0 if there is none or it cannot be read (logf says
// why).
func highWater(pid func() int, logf func(string, ...any)) float64 {
	if pid == nil || pid() == 0 {
		return 0
	}
	v, err := peakRSS(pid())
	if err != nil {
		logf("the apiserver's peak RSS: %v", err)
		return 0
	}
	return float64(v)
}

// resetHighWater resets the high-water mark of the process pid gives, if any.
func resetHighWater(pid func() int, logf func(string, ...any)) {
	if pid == nil || pid() == 0 {
		return
	}
	if err := resetPeakRSS(pid()); err != nil {
		logf("resetting the apiserver's peak RSS: %v", err)
	}
}
