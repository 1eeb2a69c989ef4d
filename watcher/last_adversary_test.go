package watcher

import (
	"fmt"
	"testing"
	"time"
)

// A server behind every list it serves (one restored between each list and
// its WATCH): every LIST succeeds at a newer resourceVersion, every WATCH is
// refused "too large resource version", and every WatchList is cut before
// its initial events end. Each refusal relists, as a 410 does; the request
// bound (40 in any minute) holds, and at the cap a list comes at least every
// two capped waits (no stall) and at most four LISTs and four WATCHes a
// minute (no storm).
func TestTooLargeAfterEveryListHoldsTheBound(t *testing.T) {
	for _, wl := range []bool{false, true} {
		for _, r := range []float64{0, 0.999} {
			m := NewMachine(DefaultBackoff, wl, func() float64 { return r })
			now := t0
			a := m.Start(now)
			var at []time.Time
			var kind []ActionKind
			rv, refusedFrom := 100, map[string]int{}
			for now.Sub(t0) < 30*time.Minute {
				var o Outcome
				switch a.Kind {
				case Wait:
					now = now.Add(a.Delay)
				case List:
					now = now.Add(100 * time.Millisecond)
					rv += 10
					o = Outcome{RV: fmt.Sprint(rv)}
				case WatchList:
					now = now.Add(100 * time.Millisecond)
					o = Outcome{Opened: true, Frames: 3, Err: cut, Open: 100 * time.Millisecond, Timeout: fiveMin}
				case Watch:
					now = now.Add(100 * time.Millisecond)
					if refusedFrom[a.RV]++; refusedFrom[a.RV] > 2 {
						t.Fatalf("watchList=%v r=%v: WATCH from %s refused %d times without a list between", wl, r, a.RV, refusedFrom[a.RV])
					}
					o = Outcome{Err: errTooLrg, Timeout: fiveMin}
				case Probe:
					now = now.Add(100 * time.Millisecond)
					o = Outcome{RV: fmt.Sprint(rv)}
				default:
					t.Fatalf("unexpected %s (%s)", a.Kind, a.Reason)
				}
				if a.Kind != Wait {
					at, kind = append(at, now), append(kind, a.Kind)
				}
				o.At = now
				a = m.Step(o)
			}
			most, lists, watches, gap := 0, 0, 0, time.Duration(0)
			var lastList time.Time
			for i := range at {
				n, l, w := 0, 0, 0
				for j := i; j < len(at) && at[j].Sub(at[i]) < time.Minute; j++ {
					n++
					switch kind[j] {
					case List, WatchList:
						l++
					default:
						w++
					}
				}
				most = max(most, n)
				if at[i].Sub(t0) > 10*time.Minute {
					lists, watches = max(lists, l), max(watches, w)
					if kind[i] == List && !lastList.IsZero() {
						gap = max(gap, at[i].Sub(lastList))
					}
				}
				if kind[i] == List {
					lastList = at[i]
				}
			}
			t.Logf("watchList=%v r=%v: %d requests in 30 min, at most %d a minute; at the cap %d lists, %d watches a minute, lists at most %s apart",
				wl, r, len(at), most, lists, watches, gap)
			if most > 40 || lists > 4 || watches > 4 || gap > 2*DefaultBackoff.Max+time.Second {
				t.Errorf("watchList=%v r=%v: %d requests in a minute (bound 40); at the cap %d lists and %d watches a minute, lists %s apart",
					wl, r, most, lists, watches, gap)
			}
		}
	}
}
