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

// A schedule is deterministic per seed (a failing seed replays with
// -explore.seed=N): twenty runs of seed 21 make the same requests, converge alike.
func TestTheExplorerReplaysOneWayPerSeed(t *testing.T) {
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

// Seeds whose streams have several things due at once (1448, 1497) replay one
// way too: a stream acts on what is due in a fixed order, not in select's.
func TestTheExplorerReplaysOneWayWhenSeveralThingsAreDueAtOnce(t *testing.T) {
	for _, seed := range []uint64{1448, 1497} {
		if msg := replaysOneWay(t, seed, 10); msg != "" {
			t.Error(msg)
		}
	}
}

// Under -race, seed 25 (a rollback: one resourceVersion written twice) breaks
// no rule: the checker learns each write's time before a stream carries it.
func TestTheExplorerKnowsAWritesTimeBeforeAStreamCarriesIt(t *testing.T) {
	if !raceEnabled {
		t.Skip("only under -race")
	}
	if msg := replaysOneWay(t, 25, 12); strings.Contains(msg, "broke a rule") {
		t.Fatal(msg)
	}
}
