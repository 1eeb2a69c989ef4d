package scorecard

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func writeEvents(t *testing.T, lines string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "events.txt")
	if err := os.WriteFile(path, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// The handler's last word on each key is held to the server's state at the
// end: a deletion heard late counts (a lagging handler is not a losing
// one); a key deleted before the client heard of it is owed nothing; a key
// the server holds must have been heard at its resourceVersion; a key gone
// must have been heard deleted, and one added again after its deletion is a
// ghost.
func TestTheHandlersLastWordIsHeldToTheServer(t *testing.T) {
	end := time.Unix(100, 0)
	// ns/a: listed, deleted during the fault, its deletion heard after the
	// fault's end. ns/b: listed, deleted, never heard deleted. ns/c:
	// deleted before the client's initial sync, never heard of. ns/d:
	// deleted, but back on the server at the end (resurrected), never heard
	// back. ns/e: updated to 40, heard at 13 only. ns/f: created at 41,
	// never heard. ns/g: deleted, heard deleted, then added again (a ghost).
	path := writeEvents(t, "A 10 50000000000 ns/a\nA 11 50000000000 ns/b\nA 12 50000000000 ns/d\nA 13 50000000000 ns/e\nA 14 50000000000 ns/g\n"+
		"D 12 60000000000 ns/d\nD 14 70000000000 ns/g\n"+
		"D 20 150000000000 ns/a\nU 21 160000000000 ns/canary\nA 14 170000000000 ns/g\n")
	ev, err := readEvents(path, end, "ns/canary", "21")
	if err != nil {
		t.Fatal(err)
	}
	if ev.after != 3 || ev.canaryAt != time.Unix(160, 0) {
		t.Errorf("%d events after the end, canary at %v; want 3, 160 s", ev.after, ev.canaryAt)
	}
	server := map[string]string{"ns/d": "12", "ns/e": "40", "ns/f": "41", "ns/canary": "21"}
	notHeard, stale, extra, ghosts := ev.against(server)
	if notHeard != 2 || stale != 1 || extra != 2 || ghosts != 1 {
		t.Errorf("%d never heard, %d stale, %d deletions never heard (%d ghosts); want 2 (ns/d, ns/f), 1 (ns/e), 2 (ns/b, ns/g), 1 (ns/g)",
			notHeard, stale, extra, ghosts)
	}
}

// The canary counts as heard only at the resourceVersion its write made: a
// relist's re-report of the unchanged object, after the fault, is not it.
func TestTheCanaryIsHeardAtItsResourceVersionNotByKey(t *testing.T) {
	path := writeEvents(t, "A 10 50000000000 ns/canary\nS 10 150000000000 ns/canary\n")
	ev, err := readEvents(path, time.Unix(100, 0), "ns/canary", "21")
	if err != nil {
		t.Fatal(err)
	}
	if !ev.canaryAt.IsZero() {
		t.Errorf("a re-report at the old resourceVersion counted as the canary, at %v", ev.canaryAt)
	}
	if ev.after != 1 {
		t.Errorf("%d events after the end, want 1", ev.after)
	}
}

// A client that crashed may leave a cut last line: it is skipped.
func TestACutEventsLineIsSkipped(t *testing.T) {
	ev, err := readEvents(writeEvents(t, "A 10 50000000000 ns/a\nA 1"), time.Unix(100, 0), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(ev.last) != 1 {
		t.Errorf("%d keys heard, want 1: %v", len(ev.last), ev.last)
	}
}

// A key the server holds, whose last word the handler heard is a deletion
// (the client told its handler the object was deleted, and it was not), is
// never heard as the server holds it: lost data, once the client follows.
func TestADeletionHeardOfALiveObjectIsLostData(t *testing.T) {
	path := writeEvents(t, "A 10 50000000000 ns/a\nD 10 120000000000 ns/a\nU 21 150000000000 ns/canary\n")
	ev, err := readEvents(path, time.Unix(100, 0), "ns/canary", "21")
	if err != nil {
		t.Fatal(err)
	}
	m := Measure{Converged: true, HeardCanary: !ev.canaryAt.IsZero()}
	m.NotHeard, m.HeardStale, m.HeardExtra, m.Ghosts = ev.against(map[string]string{"ns/a": "10", "ns/canary": "21"})
	if m.NotHeard != 1 {
		t.Errorf("%d never heard, want 1 (ns/a, heard deleted while live)", m.NotHeard)
	}
	if v, why := Verdict(m); v != LostData {
		t.Errorf("%s (%s), want %s", v, why, LostData)
	}
}

// What the handler heard before the fault began satisfies no check of a
// write made during it: a handler deaf from the fault's start is counted
// on each (the create never heard, the update heard at the resourceVersion
// from before, the deletion never heard), and the canary's key heard
// before the fault's end, even at the canary's resourceVersion, is not the
// canary heard.
func TestWhatTheHandlerHeardBeforeTheFaultSatisfiesNoWriteMadeInIt(t *testing.T) {
	// Heard before the fault (at 50 s): ns/a at 10, ns/b at 11, the
	// canary's key at 12. During the fault (60 to 100 s): ns/c created at 20,
	// ns/a updated to 21, ns/b deleted; the canary written at 30 after it.
	path := writeEvents(t, "A 10 50000000000 ns/a\nA 11 50000000000 ns/b\nA 12 50000000000 ns/canary\nU 30 90000000000 ns/canary\n")
	ev, err := readEvents(path, time.Unix(100, 0), "ns/canary", "30")
	if err != nil {
		t.Fatal(err)
	}
	if !ev.canaryAt.IsZero() || ev.after != 0 {
		t.Errorf("the canary heard at %v, %d events after the end; want never, 0", ev.canaryAt, ev.after)
	}
	notHeard, stale, extra, _ := ev.against(map[string]string{"ns/a": "21", "ns/c": "20", "ns/canary": "30"})
	if notHeard != 1 || stale != 1 || extra != 1 {
		t.Errorf("%d never heard, %d stale, %d deletions never heard; want 1 (ns/c), 1 (ns/a), 1 (ns/b)", notHeard, stale, extra)
	}
}
