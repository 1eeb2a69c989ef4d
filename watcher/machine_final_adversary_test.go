package watcher

import (
	"fmt"
	"testing"
	"time"
)

// From the final review of a575ffc (erroredOn): the first ERROR after
// progress of a stream that follows a list re-watches ("Once: a second
// stream in a row that ends so relists"). A reshard that cuts the re-WATCH
// after such an ERROR relists, but erroredOn outlives that list: the first
// stream from the new list that ends in an ERROR after an event relists at
// once, a second list for one broken stream.
func TestErroredOnDoesNotOutliveAReshard(t *testing.T) {
	s, _ := newScript(t, false)
	s.brokenAfterProgress()
	// The loop cuts that WATCH for a new shard: a list of it.
	if r := s.m.Resharded(); r.Kind != List {
		t.Fatalf("Resharded: %s, want List", r.Kind)
	}
	s.step(time.Second, Outcome{RV: "20"}, Action{Kind: Watch, RV: "20"}, Watching)
	// The first stream from that list ends in an ERROR after an event.
	s.now = s.now.Add(time.Second)
	got := s.m.Step(Outcome{At: s.now, RV: "21", Opened: true, Frames: 1, Err: err500, ErrorEvent: true, Open: time.Second, Timeout: fiveMin})
	if got.Kind != Wait {
		t.Fatalf("the first stream since a list (made for a reshard) ended in an ERROR after an event: %s (%s); "+
			"want a wait and a re-watch from 21: the stream before the list set erroredOn and it outlived the list", got.Kind, got.Reason)
	}
}

// From the final review of a575ffc: erroredOn is set by any stream that
// ends in an ERROR after progress, however long and healthy it was. Two
// streams in a row, each open ten minutes and carrying a change a second,
// each ended by an ERROR (a 500 from an apiserver whose etcd hiccupped),
// relist at the second: a full LIST where the store is one event behind at
// most. The rule's reason (a server that ERRORs after every event keeps
// the store a backoff wait behind) does not hold for healthy streams.
func TestErroredOnIgnoresHealthyStreams(t *testing.T) {
	s, _ := newScript(t, false)
	s.step(0, listed10, Action{Kind: Watch, RV: "10"}, Watching)
	rv := 10
	for i := range 2 {
		rv += 600
		s.now = s.now.Add(10 * time.Minute)
		o := Outcome{At: s.now, RV: fmt.Sprint(rv), Opened: true, Frames: 600, Err: err500, ErrorEvent: true, Open: 10 * time.Minute, Timeout: 0}
		if !s.m.Healthy(o) {
			t.Fatalf("a stream open 10 minutes is not healthy")
		}
		a := s.m.Step(o)
		if a.Kind != Wait {
			t.Fatalf("stream %d (open 10m, 600 events, then an ERROR): %s (%s), want a wait and a re-watch from %d", i+1, a.Kind, a.Reason, rv)
		}
		s.wait(a, Action{Kind: Watch, RV: fmt.Sprint(rv)}, Watching)
	}
}

// The request bound (watcher/doc.go: at most 40 requests in any minute;
// at the cap two LISTs and four WATCHes a minute: each relist's WATCH
// follows it at once) under a server that
// sends an ERROR after every event, the LISTs succeeding: the shortest
// jitter (r close to 1) and none (r = 0).
func TestErrorAfterEveryEventHoldsTheRequestBound(t *testing.T) {
	for _, r := range []float64{0, 0.999} {
		var at []time.Time // request times
		var kind []ActionKind
		driveBrokenStreams(t, r, 20*time.Minute, func(int) bool { return true }, func(d ActionKind, now time.Time) {
			at, kind = append(at, now), append(kind, d)
		})
		most, lists, watches := 0, 0, 0
		for i := range at {
			n, l, w := 0, 0, 0
			for j := i; j < len(at) && at[j].Sub(at[i]) < time.Minute; j++ {
				n++
				if kind[j] == List {
					l++
				} else {
					w++
				}
			}
			most = max(most, n)
			if at[i].Sub(t0) > 10*time.Minute { // the backoff is at its cap
				lists, watches = max(lists, l), max(watches, w)
			}
		}
		t.Logf("r=%v: %d requests in 20 minutes, at most %d in a minute; at the cap at most %d LISTs and %d WATCHes in a minute", r, len(at), most, lists, watches)
		if most > 40 || lists > 2 || watches > 4 {
			t.Errorf("r=%v: %d requests in a minute (bound 40); at the cap %d LISTs and %d WATCHes in a minute, "+
				"where watcher/doc.go says two LISTs and four WATCHes for streams that carry an event and then an ERROR", r, most, lists, watches)
		}
	}
}

// From the final review of a575ffc: erroredOn is cleared by any stream
// that does not end in an ERROR, so a server whose streams each carry one
// event and then break, every other one with an ERROR and the others cut
// (a proxy that flaps both ways), is never relisted from: every stream
// carries the store one change on, one backoff wait (15 s to 30 s at the
// cap) apart, and it falls behind for as long as the fault lasts, the lag
// the rule was made to bound ("a relist every other stream keeps it within
// two waits").
func TestErrorAfterEveryOtherEventStillRelists(t *testing.T) {
	lists, streams := 0, 0
	driveBrokenStreams(t, 0, 10*time.Minute, func(n int) bool { return n%2 == 0 }, func(d ActionKind, _ time.Time) {
		if d == List {
			lists++
		} else {
			streams++
		}
	})
	if lists < 2 {
		t.Errorf("10 minutes of streams that each carry one event and break, every other one with an ERROR: %d WATCHes, "+
			"%d LISTs (the first); the store took in one change a stream and never relisted", streams, lists)
	}
}

// driveBrokenStreams steps a machine whose jitter draws r for d of streams
// that each carry one change and end: in an ERROR where errs(n) says (n
// counts the streams from 1), cut otherwise; every LIST succeeds in 100 ms.
// request hears of each LIST and WATCH as it is made.
func driveBrokenStreams(t *testing.T, r float64, d time.Duration, errs func(n int) bool, request func(ActionKind, time.Time)) {
	t.Helper()
	m := NewMachine(DefaultBackoff, false, func() float64 { return r })
	now := t0
	a := m.Start(now)
	rv, streams := 10, 0
	for now.Sub(t0) < d {
		var o Outcome
		switch a.Kind {
		case Wait:
			now = now.Add(a.Delay)
		case List:
			request(List, now)
			rv++
			now = now.Add(100 * time.Millisecond)
			o = Outcome{RV: fmt.Sprint(rv)}
		case Watch:
			request(Watch, now)
			streams++
			rv++ // the one change the stream carries
			now = now.Add(100 * time.Millisecond)
			o = Outcome{RV: fmt.Sprint(rv), Opened: true, Frames: 1, Err: cut, Open: 100 * time.Millisecond, Timeout: fiveMin}
			if errs(streams) {
				o.Err, o.ErrorEvent = err500, true
			}
		default:
			t.Fatalf("r=%v: unexpected %s (%s)", r, a.Kind, a.Reason)
		}
		o.At = now
		a = m.Step(o)
	}
}
