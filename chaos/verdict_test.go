package chaos

import (
	"testing"
	"time"

	"rawwatch/ring"
	"rawwatch/shard"
	"rawwatch/watcher"
)

// The request bound is package watcher's: 40 a minute with its default
// backoff. Compressed ×15, the backoff climbs to its cap in under 2 s and
// waits at least 1 s there, and may reset after 8 s: many more.
func TestRequestBoundFollowsTheBackoff(t *testing.T) {
	if n := requestBound(watcher.DefaultBackoff); n != 40 {
		t.Errorf("default backoff: %d, want 40", n)
	}
	compressed := Config{Compress: 15}.Watch().Backoff
	if n := requestBound(compressed); n != 320 {
		t.Errorf("backoff compressed ×15 (%+v): %d, want 320", compressed, n)
	}
}

// A scene is the records of a sharded run around one deletion, written by
// hand: which replica claimed the deletion's slot when, what each one knew,
// heard and dropped, and who was killed. Times are offsets from t0.
type scene struct {
	t0   time.Time
	j    *judge
	d    deletion
	slot int
	by   map[string]*replica
}

// newScene: replicas named names, the ring's lease 6 s (the rules' bound
// is then 24 s), and one deletion at +100 s of an object created at
// resourceVersion 150.
func newScene(names ...string) *scene {
	s := &scene{t0: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), by: map[string]*replica{}}
	s.j = &judge{sharded: true, lease: 6 * time.Second, ref: newReferee()}
	for _, n := range names {
		r := &replica{name: n, rec: newRecorder(s.j.ref)}
		s.by[n] = r
		s.j.replicas = append(s.j.replicas, r)
	}
	s.d = deletion{incarnation: incarnation{Key: "ns/obj", UID: "uid-1"}, Created: 150, At: s.at(100 * time.Second)}
	s.slot = shard.SlotOf("uid-1")
	s.j.deleted = []deletion{s.d}
	return s
}

func (s *scene) at(d time.Duration) time.Time { return s.t0.Add(d) }

// claims: replica name's claims change at offset to the deletion's slot
// (claimed) or nothing, by a fence or not, its watch at rv.
func (s *scene) claims(name string, at time.Duration, claimed, fenced bool, rv int64) *scene {
	c := ring.Claims{}
	if claimed {
		c.Working = shard.SlotsOf(s.slot)
	}
	s.by[name].rec.owns.add(s.at(at), c, fenced, rv)
	return s
}

func (s *scene) kill(name string, at time.Duration) *scene {
	s.by[name].to = s.at(at)
	return s.claims(name, at, false, false, 0) // its stop drops its claims
}

// knew: replica name had the object from t0 on (knewAt: from offset at).
func (s *scene) knew(name string) *scene { return s.knewAt(name, 0) }

func (s *scene) knewAt(name string, at time.Duration) *scene {
	s.by[name].rec.known[s.d.incarnation] = s.at(at)
	return s
}

func (s *scene) heard(name string) *scene {
	s.by[name].rec.heardDeleted[s.d.incarnation] = true
	return s
}

func (s *scene) dropped(name string, at time.Duration) *scene {
	s.by[name].rec.dropped[s.d.incarnation] = s.at(at)
	return s
}

// unwatch: replica name's watch leaves the slot at offset at (a reshard).
func (s *scene) unwatch(name string, at time.Duration) *scene {
	r := s.by[name].rec
	r.watching = append(r.watching, listed{at: s.at(at)})
	return s
}

func (s *scene) gap(name string, from, to int64) *scene {
	s.by[name].rec.gaps = append(s.by[name].rec.gaps, [2]int64{from, to})
	return s
}

func (s *scene) list(name string, at time.Duration, rv int64) *scene {
	r := s.by[name].rec
	r.lists = append(r.lists, listed{at: s.at(at), rv: rv, slots: shard.SlotsOf(s.slot)})
	r.watching = append(r.watching, r.lists[len(r.lists)-1])
	return s
}

func (s *scene) verdict() Verdict {
	var v Verdict
	for _, d := range s.j.deleted {
		s.j.judgeDeletion(&v, d)
	}
	return v
}

// excused names how a scene's verdict judged its deletion: lost, by which
// rule excused, or seen.
func excused(v Verdict) string {
	switch {
	case len(v.UnseenDeletions) > 0:
		return "lost"
	case v.Invisible > 0:
		return "relist gap"
	case len(v.WithKilled) > 0:
		return "killed"
	case v.UnclaimedWhy["killed"] > 0:
		return "unclaimed after a kill"
	case v.UnclaimedWhy["fenced"] > 0:
		return "fenced"
	}
	return "seen"
}

// Every rule that excuses a deletion no replica saw, with its control: the
// same loss without the rule's condition fails the verdict. Each rule is
// bounded (in resourceVersions, or by judge.bound: 24 s here).
func TestEveryExcuseHasAControl(t *testing.T) {
	// a claims the slot from 0 s on, and b does not: the common start.
	owned := func() *scene { return newScene("a", "b", "k").claims("a", 0, true, false, 10) }
	for _, c := range []struct {
		name  string
		scene *scene
		want  string
	}{
		// Relist gap: the object lived inside a gap of its claimant's
		// watch, and nobody had it.
		{"relist gap", owned().gap("a", 100, 200), "relist gap"},
		{"relist gap: created outside the gap", owned().gap("a", 160, 200), "lost"},
		// Another replica had the object while it claimed the
		// slot (it may have reconciled it, and handed it over to a, whose
		// relist came after the deletion): its deletion was to reach
		// someone. So too if it came to claim the slot while it still had
		// the object (its relist would have reported it gone).
		{"relist gap: the old owner had the object", newScene("a", "b").claims("b", 0, true, false, 10).knew("b").
			claims("b", 50*time.Second, false, false, 140).claims("a", 50*time.Second, true, false, 140).gap("a", 100, 200), "lost"},
		{"relist gap: a watcher had the object, then claimed the slot", owned().gap("a", 100, 200).
			list("b", 90*time.Second, 140).knewAt("b", 95*time.Second).claims("b", 120*time.Second, true, false, 200), "lost"},
		// A replica that only watched the slot (a joiner's target) had the
		// object and let it go, never claiming the slot while it had it: it
		// owed the deletion to nobody, and the claimant's gap hid it, as it
		// would hide it from one controller.
		{"relist gap: a watcher had the object and dropped it", owned().gap("a", 100, 200).
			list("b", 90*time.Second, 140).knewAt("b", 95*time.Second).heard("b").dropped("b", 110*time.Second), "relist gap"},
		{"relist gap: a watcher had the object, dropped it, claimed the slot later", owned().gap("a", 100, 200).
			list("b", 90*time.Second, 140).knewAt("b", 95*time.Second).heard("b").dropped("b", 110*time.Second).
			claims("b", 120*time.Second, true, false, 200), "relist gap"},
		{"relist gap: a watcher had the object, its watch left the slot, it claimed it later", owned().gap("a", 100, 200).
			list("b", 90*time.Second, 140).knewAt("b", 95*time.Second).unwatch("b", 105*time.Second).
			claims("b", 120*time.Second, true, false, 200), "relist gap"},
		{"relist gap: the claimant had the object before it claimed the slot", newScene("a", "b").list("a", 40*time.Second, 100).
			knewAt("a", 45*time.Second).claims("a", 50*time.Second, true, false, 140).gap("a", 100, 200), "lost"},
		// Nobody claimed the slot (the ring not formed yet, or every
		// replica fenced): a gap of every watch of the slot excuses it;
		// one watch of it without a gap, or no watch of it, does not.
		{"relist gap, unclaimed: every watcher's", newScene("a", "b").list("a", 50*time.Second, 120).gap("a", 120, 200).
			list("b", 60*time.Second, 130).gap("b", 130, 210), "relist gap"},
		{"relist gap, unclaimed: one watcher without a gap", newScene("a", "b").list("a", 50*time.Second, 120).gap("a", 120, 200).
			list("b", 60*time.Second, 130), "lost"},
		{"relist gap, unclaimed: nobody watched the slot", newScene("a", "b").gap("a", 120, 200).gap("b", 130, 210), "lost"},

		// A handoff has no window: the old owner lets a slot go only once
		// the new owner's list and watch cover it (swept against), and a
		// clean leave hands its slots over the same way. a let the slot go
		// at 101 s with its watch at 140 (before the object's creation), b
		// took it over at 103 s by a list at 102 s, resourceVersion 160,
		// after it: lost, not excused.
		{"a handoff: the old owner's watch before the creation, the new owner's list after the deletion", owned().claims("a", 101*time.Second, false, false, 140).
			list("b", 102*time.Second, 160).claims("b", 103*time.Second, true, false, 160), "lost"},

		// Killed: k claimed the slot, and died 10 s after the deletion.
		{"killed, claiming the slot", newScene("a", "k").claims("k", 0, true, false, 10).kill("k", 110*time.Second), "killed"},
		{"killed, claiming the slot, 40 s after the deletion", newScene("a", "k").claims("k", 0, true, false, 10).kill("k", 140*time.Second), "lost"},
		{"killed, having let the slot go before", newScene("a", "k").claims("k", 0, true, false, 10).
			claims("k", 105*time.Second, false, false, 200).kill("k", 110*time.Second), "lost"},
		// Killed: k held the deletion (it watched the slot, nobody
		// claimed it) when it died.
		{"killed, holding it", newScene("a", "k").heard("k").kill("k", 105*time.Second), "killed"},
		// k heard of it and dropped it, while a Worked the slot
		// (and still does), minutes before the kill.
		{"killed, having dropped it minutes before, a live owner working the slot", owned().heard("k").
			dropped("k", 101*time.Second).kill("k", 300*time.Second), "lost"},
		{"killed, having dropped it, the slot unclaimed", newScene("a", "k").heard("k").
			dropped("k", 101*time.Second).kill("k", 105*time.Second), "lost"},
		{"killed, holding it, a live owner working the slot", owned().heard("k").kill("k", 105*time.Second), "lost"},

		// Unclaimed after a kill: k, the slot's owner, was killed at 90 s.
		{"unclaimed after a kill", newScene("a", "k").claims("k", 0, true, false, 10).kill("k", 90*time.Second), "unclaimed after a kill"},
		{"unclaimed 40 s after a kill", newScene("a", "k").claims("k", 0, true, false, 10).kill("k", 60*time.Second), "lost"},
		{"unclaimed after a handoff", newScene("a", "k").claims("k", 0, true, false, 10).claims("k", 90*time.Second, false, false, 100), "lost"},

		// Fenced: a, the slot's owner, fenced itself at 90 s; or a claimed
		// it and fenced itself 5 s after the deletion; or b heard of it,
		// fenced itself, and dropped it with the slot.
		{"unclaimed after a fence", owned().claims("a", 90*time.Second, false, true, 100), "fenced"},
		{"unclaimed 40 s after a fence", owned().claims("a", 60*time.Second, false, true, 100), "lost"},
		{"claimant fenced after it", owned().claims("a", 105*time.Second, false, true, 100), "fenced"},
		{"claimant fenced 40 s after it", owned().claims("a", 140*time.Second, false, true, 100), "lost"},
		{"heard, fenced, dropped", newScene("a", "b").heard("b").claims("b", 103*time.Second, false, true, 100).dropped("b", 110*time.Second), "fenced"},
		{"heard, fenced 40 s later, dropped", newScene("a", "b").heard("b").claims("b", 140*time.Second, false, true, 100).dropped("b", 150*time.Second), "lost"},
		{"heard, dropped, never fenced", newScene("a", "b").heard("b").dropped("b", 110*time.Second), "lost"},
		// Fenced, the ring forming: nobody claimed the slot at the
		// deletion; b, watching it, claimed it first at 103 s and fenced
		// itself at 110 s (an API server's restart fences every replica).
		{"the ring forming, its first claimant fenced", newScene("a", "b").list("b", 90*time.Second, 140).
			claims("b", 103*time.Second, true, false, 140).claims("b", 110*time.Second, false, true, 140), "fenced"},
		{"the ring forming, its first claimant fenced 40 s after", newScene("a", "b").list("b", 90*time.Second, 140).
			claims("b", 103*time.Second, true, false, 140).claims("b", 140*time.Second, false, true, 140), "lost"},
		{"the ring forming, another claimed it first", newScene("a", "b").list("b", 90*time.Second, 140).claims("a", 102*time.Second, true, false, 140).
			claims("b", 103*time.Second, true, false, 140).claims("b", 110*time.Second, false, true, 140), "lost"},
		{"the ring forming, its first claimant did not watch the slot", newScene("a", "b").
			claims("b", 103*time.Second, true, false, 140).claims("b", 110*time.Second, false, true, 140), "lost"},
		{"the ring forming, its first claimant fenced, heard of it and worked the slot again", newScene("a", "b").list("b", 90*time.Second, 140).heard("b").
			claims("b", 103*time.Second, true, false, 140).claims("b", 110*time.Second, false, true, 140).claims("b", 115*time.Second, true, false, 200), "lost"},
	} {
		v := c.scene.verdict()
		if got := excused(v); got != c.want {
			t.Errorf("%s: %s, want %s (%+v)", c.name, got, c.want, v)
		}
	}
}

// One set of records makes one verdict, whatever the order of the replicas.
// When two replicas' records both claim the slot at the deletion (a Working
// at the old owner's Releasing, or two members' clocks recording one
// handoff a moment apart), a live claimant throughout is not excused by the
// other's fence: a claims the slot from 0 s on and never lets it go; b
// claims it from 90 s and fences itself at 105 s. Lost, with replicas
// [a b] and [b a].
func TestTheVerdictDoesNotDependOnTheOrderOfTheReplicas(t *testing.T) {
	build := func(names ...string) Verdict {
		s := newScene(names...).claims("a", 0, true, false, 10).
			claims("b", 90*time.Second, true, false, 140).claims("b", 105*time.Second, false, true, 150)
		return s.verdict()
	}
	ab, ba := build("a", "b"), build("b", "a")
	if len(ab.UnseenDeletions) != len(ba.UnseenDeletions) || len(ab.UnseenDeletions) == 0 {
		t.Errorf("replicas [a b]: excused as fenced %d (lost %d), replicas [b a]: lost %d; one set of records, two verdicts, and a live claimant throughout should make it lost",
			ab.UnclaimedWhy["fenced"], len(ab.UnseenDeletions), len(ba.UnseenDeletions))
	}
}
