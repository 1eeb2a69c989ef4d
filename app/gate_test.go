package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"rawwatch/api/v1alpha1"
	"rawwatch/observe"
	"rawwatch/ring"
	"rawwatch/shard"
	"rawwatch/sharding"
	"rawwatch/store"
	"rawwatch/watcher"
)

// tombstoneIn is a deletion of an object whose UID falls in slot.
func tombstoneIn(t *testing.T, slot int) store.Delta[Object] {
	t.Helper()
	for i := 0; ; i++ {
		uid := fmt.Sprintf("uid-%d", i)
		if shard.SlotOf(uid) == slot {
			obj := &v1alpha1.MyResource{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: uid, UID: types.UID(uid)}}
			return store.Delta[Object]{Type: store.Deleted, Key: "ns/" + uid, Object: obj}
		}
	}
}

// A fence takes every claim away for a moment (after an outage of the API
// server, from every replica at once), and the ring comes back as it was.
// The deletions still queued when it struck must not be lost with the
// claims: the gate holds them while the watcher still watches their slot,
// and hands them back when the replica works the slot again.
func TestAFenceKeepsTheDeletionsStillQueued(t *testing.T) {
	g := newGate(store.New[Object](), observe.Func(func(observe.Event) {}))
	g.setDeadline(time.Now().Add(time.Hour))
	mine, other := shard.SlotsOf(7), shard.SlotsOf(9)
	working := ring.Claims{Working: mine.Union(other), Target: mine.Union(other)}
	g.set(working)
	d, moved := tombstoneIn(t, 7), tombstoneIn(t, 9)
	ctx := context.Background()
	if _, leave, ok := g.enter(ctx, d, true); !ok {
		t.Fatal("a deletion in a worked slot was refused")
	} else {
		leave()
	}

	watched, _, _ := g.set(ring.Claims{}) // fenced
	if watched != working.Watched() {
		t.Fatalf("fenced, the watcher is to watch %v, want what it watched: %v", watched, working.Watched())
	}
	for _, d := range []store.Delta[Object]{d, moved} {
		if _, _, ok := g.enter(ctx, d, true); ok {
			t.Fatalf("fenced, a deletion in slot %d was let in", shard.SlotOf(string(d.Object.GetUID())))
		}
	}

	// Back in the ring: slot 7 is worked again, slot 9 went to another
	// replica (no longer watched here: its deletion is dropped).
	back := ring.Claims{Working: mine, Target: mine}
	_, gained, replay := g.set(back)
	if gained != mine || len(replay) != 1 || replay[0].Key != d.Key {
		t.Fatalf("back in the ring: gained %v, replayed %v; want slot 7 and the deletion held for it", gained, replay)
	}
	if _, _, replay := g.set(ring.Claims{Working: mine.Union(other), Target: mine.Union(other)}); len(replay) != 0 {
		t.Fatalf("slot 9 back: replayed %v, want nothing (its deletion was dropped when it stopped being watched)", replay)
	}
}

// failingSource answers every LIST with an error, and counts them.
type failingSource struct{ lists atomic.Int64 }

func (s *failingSource) List(context.Context, metav1.ListOptions) (io.ReadCloser, error) {
	s.lists.Add(1)
	return nil, errors.New("500: the server is failing")
}

func (s *failingSource) Watch(context.Context, metav1.ListOptions) (io.ReadCloser, error) {
	return nil, errors.New("not watched here")
}

// A sweep the server keeps refusing is tried again after a pause doubling
// from a renew period up to a lease duration, one at a time: over a time T,
// at most 1 + log2(lease/renew) + T/lease LISTs (two a minute at the
// defaults, once the pause is at its cap), and never given up.
func TestAFailingSweepIsRetriedAtABoundedRate(t *testing.T) {
	const renew, lease, run = 10 * time.Millisecond, 80 * time.Millisecond, time.Second
	src := &failingSource{}
	s := store.New[Object]()
	a := &App{Store: s, Sharded: sharding.NewWatcher[Object](src, s, watcher.Options[Object]{}, nil),
		gate: newGate(s, observe.Func(func(observe.Event) {}))}
	five := shard.SlotsOf(5)
	a.gate.set(ring.Claims{Releasing: five, Sweep: five})
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	a.sweep(ctx, renew, lease)
	// 10+20+40+80 ms, then 80 ms each: 1 + 4 + (1000-150)/80.
	bound := int64(1 + 3 + run/lease)
	n := src.lists.Load()
	if n > bound || n < 6 {
		t.Errorf("%d LISTs in %v, want at most %d, and more than the 5 of the pause's ramp (it keeps trying)", n, run, bound)
	}
	t.Logf("%d LISTs in %v (bound %d)", n, run, bound)
	if !a.gate.sweptSlots().Slots.Empty() {
		t.Errorf("a sweep that never succeeded counts as done: %v", a.gate.sweptSlots().Slots)
	}
}

// The gate has a clock: past the ring's fence deadline it admits nothing,
// whatever the claims it holds say, until the ring moves the deadline. A
// replica frozen past its lease (SIGSTOP, a VM paused, a GC storm) resumes
// with its workers and its ring goroutines racing: a worker must not start
// a reconcile in a slot another replica has taken meanwhile, before the
// ring's fence has dropped the claims. (The gate had no clock: it admitted
// anything Working, fence or not.)
func TestTheGateAdmitsNothingPastTheFence(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g := newGate(store.New[Object](), observe.Func(func(observe.Event) {}))
	g.now = func() time.Time { return now }
	seven := shard.SlotsOf(7)
	g.set(ring.Claims{Working: seven, Target: seven})
	d := tombstoneIn(t, 7)
	change := store.Delta[Object]{Type: store.Updated, Key: d.Key, Object: d.Object}
	ctx := context.Background()
	try := func() (admitted, entered, deleted bool) {
		_, leave, ok := g.enter(ctx, change, false)
		if ok {
			leave()
		}
		_, leaveD, okD := g.enter(ctx, d, true)
		if okD {
			leaveD()
		}
		return g.admit(change), ok, okD
	}
	g.setDeadline(now.Add(time.Second))
	if a, e, del := try(); !a || !e || !del {
		t.Fatalf("before the deadline: admitted %v, entered %v, deletion %v; want all let in", a, e, del)
	}
	now = now.Add(time.Second) // the deadline: out, the claims unchanged
	if a, e, del := try(); a || e || del {
		t.Fatalf("at the fence deadline, still Working: admitted %v, entered %v, deletion %v; want nothing let in", a, e, del)
	}
	g.setDeadline(time.Time{}) // no lease at all
	if a, e, del := try(); a || e || del {
		t.Fatalf("with no lease: admitted %v, entered %v, deletion %v; want nothing let in", a, e, del)
	}
}
