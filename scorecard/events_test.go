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
