package watcher

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// recordingSource logs every request the loop makes, with its virtual time.
type recordingSource struct {
	Source
	mu  *sync.Mutex
	log *[]string
}

func (r recordingSource) note(kind string, o metav1.ListOptions) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*r.log = append(*r.log, fmt.Sprintf("%s %s rv=%s cont=%v", time.Now().Format("15:04:05.000"), kind, o.ResourceVersion, o.Continue != ""))
}

func (r recordingSource) List(ctx context.Context, o metav1.ListOptions) (io.ReadCloser, error) {
	r.note("LIST", o)
	return r.Source.List(ctx, o)
}

func (r recordingSource) Watch(ctx context.Context, o metav1.ListOptions) (io.ReadCloser, error) {
	r.note("WATCH", o)
	return r.Source.Watch(ctx, o)
}

// The explorer claims a schedule is deterministic per seed (a failing seed
// replays with -explore.seed=N). Seed 21, run alone several times, gave two
// different runs: the loop's requests differed, and the convergence time
// measured after the faults (1m27s or 1m28s) with them. The source:
// fakeapi's stream, after a burst of slow frames, found the bookmark timer
// fired and a write's wake-up both ready, and select picked one at random;
// it now sends the changes first.
func TestAdversaryExplorerIsNotDeterministicPerSeed(t *testing.T) {
	if msg := replaysOneWay(t, 21, 20); msg != "" {
		t.Fatal(msg)
	}
}

// replaysOneWay runs seed's schedule runs times, recording the loop's
// requests, and describes the first run that differs from the first (its
// requests or its convergence time), or the first rule broken; "" if none.
func replaysOneWay(t *testing.T, seed uint64, runs int) string {
	var first []string
	var firstConv time.Duration
	for run := range runs {
		var mu sync.Mutex
		var log []string
		s := newSchedule(seed)
		s.wrap = func(src Source) Source { return recordingSource{Source: src, mu: &mu, log: &log} }
		failure, conv := explore(t, s, DefaultBackoff)
		if failure != "" {
			return fmt.Sprintf("seed %d broke a rule in run %d: %s", seed, run+1, failure)
		}
		if run == 0 {
			first, firstConv = log, conv
			continue
		}
		if conv != firstConv || strings.Join(log, "\n") != strings.Join(first, "\n") {
			i := 0
			for i < min(len(log), len(first)) && log[i] == first[i] {
				i++
			}
			at := func(l []string) string {
				if i < len(l) {
					return l[i]
				}
				return "(end)"
			}
			t.Log(s)
			return fmt.Sprintf("seed %d is not deterministic: run 1 converged in %v with %d requests, run %d in %v with %d; the requests first differ at #%d: %q vs %q",
				seed, firstConv, len(first), run+1, conv, len(log), i, at(first), at(log))
		}
	}
	return ""
}

// Claim broken (docs/testing.md, the explorer; commit 1e3a63f: "seeds
// 201-1200, three runs each: 7 replayed two ways before, 0 now"): a
// schedule is deterministic per seed. Seeds outside the range checked
// still replay two ways, run alone; 1448 and 1497 in 1201-2999 (two runs
// each: 2 of 1,799), both every few runs:
//
//	seed 1448 is not deterministic: run 1 converged in 3s with 28 requests,
//	run 10 in 5s with 28; the requests first differ at #18: "00:07:22.692
//	WATCH rv=150 cont=false" vs "00:07:23.692 WATCH rv=151 cont=false"
//	seed 1497 is not deterministic: run 1 converged in 0s with 25 requests,
//	run 10 in 0s with 25; the requests first differ at #19: "00:06:17.288
//	WATCH rv=192 cont=false" vs "00:06:15.288 WATCH rv=191 cont=false"
//
// (a re-watch from one resourceVersion or the next: whether one more frame
// reached the loop before its stream ended was up to the scheduler.)
//
// Severity: cosmetic (a failing seed may not replay with -explore.seed=N;
// the measured convergence time moves by seconds between runs).
//
// Fixed since: a stream acts on what is due in a fixed order. Both seeds'
// streams were sending a burst of slow frames past several things due at
// once, and select picked among them at random: seed 1448's the bookmark
// due 2 s before the end and the end (a bookmark at resourceVersion 151
// first, or not), seed 1497's a cache restart and the bookmark (the end,
// or a bookmark and one more change first).
func TestAdversaryExplorerSeedsPast1200AreNotDeterministic(t *testing.T) {
	for _, seed := range []uint64{1448, 1497} {
		if msg := replaysOneWay(t, seed, 10); msg != "" {
			t.Error(msg)
		}
	}
}

// Claim broken (make test: TestExplorer plays 3,000 schedules under -race
// and must pass). Seed 25, alone under -race, breaks a rule in about a third
// of its runs (3 of 8 here; never without -race in 4):
//
//	go test -race -count=8 -run 'TestExplorer$' ./watcher/ -args -explore.seed=25
//	broke: the write time is the last write's: MODIFIED ns/obj-3 at
//	resourceVersion 87 was written at 2m52s (its newest managedFields time),
//	and the loop reported 9m7s
//
// The schedule rolls the server back (srv.Restore(origin)), so
// resourceVersion 87 is written twice: at 2m52s, then at 9m7s. The loop
// reports the second write's time, rightly; the checker's writtenAt still
// holds the first, because put records the write (lives.wrote) after
// srv.Put has made it visible, and under -race the stream's goroutine
// delivers the event in between. A harness race, not the loop's: the loop
// was right.
//
// Severity: cosmetic (a false failure of the explorer under -race: a red
// make test, or a real failure dismissed as this one).
//
// Fixed since: the server hands each write's time to the checker before any
// stream can carry the write (fakeapi.Server.Wrote).
func TestAdversaryExplorerSeed25FailsUnderRace(t *testing.T) {
	if !raceEnabled {
		t.Skip("only under -race")
	}
	if msg := replaysOneWay(t, 25, 12); strings.Contains(msg, "broke a rule") {
		t.Fatal(msg)
	}
}
