package watcher_test

import (
	"bytes"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"rawwatch/explain"
	"rawwatch/internal/fakeapi"
	"rawwatch/watcher"
)

// Adversary tests of the watchdog's silence counted across streams
// (Action.Quiet): a server rolled back behind the store (an etcd restore
// while nothing writes) answers every WATCH from our resourceVersion with
// silence, and the loop must ask where it is, within the silence limit of
// silence, at the cost of one probe.

// restoreQuietly waits for the first sync, writes after a snapshot, lets the
// loop see it, and restores the snapshot (nothing is written after): the
// server is behind the store. It returns when.
func restoreQuietly(s *sim) time.Time {
	if !s.waitSynced(time.Minute) {
		s.t.Fatal("no sync")
	}
	saved := s.srv.Save()
	s.srv.Put("ns", "c", "born after the snapshot")
	s.srv.Delete("ns", "obj-1")
	for i := 0; i < 60; i++ {
		if _, ok := s.store.Get("ns/c"); ok {
			break
		}
		s.sleep(time.Second)
	}
	if _, ok := s.store.Get("ns/c"); !ok {
		s.t.Fatal("the loop did not see c within a minute")
	}
	s.srv.Restore(saved, 0)
	return time.Now()
}

// syncedWithin polls (each virtual second) until the store equals the
// server's, for at most d; it returns how long that took.
func syncedWithin(s *sim, d time.Duration) (time.Duration, bool) {
	from := time.Now()
	for ; time.Since(from) < d; s.sleep(time.Second) {
		if equalToServer(s) {
			return time.Since(from), true
		}
	}
	return time.Since(from), equalToServer(s)
}

// A proxy that cuts every WATCH 10 s after it opened (an idle timeout of
// 10 s: nothing comes from a server behind us), in front of a rolled-back
// server. Each cut stream carries its 10 s, and the backoff waits between
// the cuts (up to 30 s) are not counted: the loop asks where the server is
// only after 15 streams and 14 waits.
func TestQuietAdversaryIdleCuttingProxyDoesNotHideARollback(t *testing.T) {
	runSim(t, 2, watcher.Options[object]{}, func(s *sim) {
		restoreQuietly(s)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // the proxy: cut any WATCH open for 10 s
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(time.Second):
				}
				for _, r := range s.srv.Requests() {
					if r.Kind == "WATCH" && r.Code == 0 && r.Ended.IsZero() && time.Since(r.At) >= 10*time.Second {
						s.srv.Cut()
					}
				}
			}
		}()
		defer func() { close(stop); wg.Wait() }()
		bound := watcher.DefaultBackoff.Max + watcher.DefaultSilenceLimit + 30*time.Second // the explorer's liveness bound
		if took, ok := syncedWithin(s, 15*time.Minute); !ok || took > bound {
			s.t.Errorf("behind a proxy that cuts idle WATCHes after 10 s, the store matched the restored server after %v (synced: %v); want within %v (backoff cap + silence limit + 30 s): the waits between the cut streams are silence too",
				took.Round(time.Second), ok, bound)
		}
	})
}

// The narration of a watchdog that fires in the third silent stream: the
// stream was abandoned after the 30 s left of the limit; --explain must not
// say only that it "sent nothing for 30s (the server bookmarks about every
// minute)", which reads as a watchdog firing on a healthy stream.
func TestQuietAdversaryWatchdogNarrationCountsTheStreamsBefore(t *testing.T) {
	var out bytes.Buffer
	var mu sync.Mutex
	n := explain.New(&lockedWriter{mu: &mu, w: &out}, explain.Options{})
	opts := watcher.Options[object]{WatchTimeoutMin: time.Minute, WatchTimeoutMax: time.Minute, Rand: func() float64 { return 0 }, Observer: n}
	runSim(t, 2, opts, func(s *sim) {
		restoreQuietly(s)
		if _, ok := syncedWithin(s, 5*time.Minute); !ok {
			s.t.Fatal("the rollback was not found")
		}
	})
	mu.Lock()
	defer mu.Unlock()
	var dog []string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.Contains(l, "WATCHDOG") {
			dog = append(dog, l)
		}
	}
	t.Log(strings.Join(dog, "\n"))
	if len(dog) != 1 || !strings.Contains(dog[0], "2m30s") {
		t.Errorf("want one WATCHDOG line that tells the 2m30s of silence across the streams; got %d:\n%s", len(dog), strings.Join(dog, "\n"))
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// A server that answers after 20 s (a slow round trip), WATCH timeouts of
// exactly a minute, rolled back. Each stream's time open counts from the
// request, the latency too; its watchdog, armed once the stream opened,
// gives it the silence limit less the streams before, not less its own
// 20 s: a second stream that ends at its timeout, 10 s before its watchdog,
// leaves 160 s of silence, and the third WATCH is opened only to be
// abandoned at once (its watchdog armed with -10 s): a request for nothing.
func TestQuietAdversaryNoWatchIsOpenedWithNoSilenceLeft(t *testing.T) {
	opts := watcher.Options[object]{WatchTimeoutMin: time.Minute, WatchTimeoutMax: time.Minute, Rand: func() float64 { return 0 }}
	runSim(t, 2, opts, func(s *sim) {
		from := restoreQuietly(s)
		if _, ok := syncedWithin(s, 10*time.Minute); !ok {
			s.t.Fatal("the rollback was not found")
		}
		for _, r := range s.srv.Requests() {
			if r.Kind == "WATCH" && r.At.After(from) && r.ClosedByClient && r.Ended.Sub(r.At) < time.Second {
				s.t.Errorf("a WATCH at %v was abandoned by the client %v after it opened: opened with no silence left",
					r.At.Sub(from).Round(time.Second), r.Ended.Sub(r.At))
			}
		}
	}, func(srv *fakeapi.Server) { srv.Latency = 20 * time.Second })
}

// The machine, given the watchdog's limit, does not ask for a WATCH with
// nothing left of it (its watchdog would abandon it as it opens): a Probe.
// And a stream that went silent after a frame was silent for the limit
// since that frame, not for the streams before it and its whole time open.
func TestQuietAdversaryMachineProbesWhenNothingIsLeft(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := watcher.NewMachine(watcher.DefaultBackoff, false, func() float64 { return 0 })
	m.SilenceLimit = watcher.DefaultSilenceLimit
	now := t0
	step := func(d time.Duration, o watcher.Outcome) watcher.Action {
		now = now.Add(d)
		o.At = now
		return m.Step(o)
	}
	m.Start(t0)
	step(0, watcher.Outcome{RV: "10"})
	// Two WATCHes that take 20 s to open and run their minute with nothing.
	frameless := watcher.Outcome{Opened: true, Open: 80 * time.Second, Timeout: time.Minute}
	if a := step(80*time.Second, frameless); a.Do != watcher.Watch || a.Quiet != 80*time.Second {
		t.Fatalf("after one silent stream: %s with Quiet %v, want a watch with 1m20s", a.Do, a.Quiet)
	}
	if a := step(80*time.Second, frameless); a.Do != watcher.Probe {
		t.Errorf("after 2m40s of silence (limit 2m30s): %s with Quiet %v (%s), want a probe", a.Do, a.Quiet, a.Reason)
	}
	step(0, watcher.Outcome{RV: "10"}) // the server is there: re-watch
	// 100 s of silence, then a stream with a bookmark at 40 s, abandoned
	// 150 s after it.
	step(100*time.Second, watcher.Outcome{Opened: true, Err: io.ErrUnexpectedEOF, Open: 100 * time.Second, Timeout: 10 * time.Minute})
	step(1600*time.Millisecond, watcher.Outcome{}) // the wait
	a := step(190*time.Second, watcher.Outcome{Opened: true, RV: "11", Frames: 1, Silent: true, Err: watcher.ErrSilent, Open: 190 * time.Second, Timeout: 10 * time.Minute})
	if a.Do != watcher.Probe || strings.Contains(a.Reason, "silent for") {
		t.Errorf("a stream silent 150 s after its bookmark: %s (%s), want a probe that does not count the frame's stream as silence", a.Do, a.Reason)
	}
}
