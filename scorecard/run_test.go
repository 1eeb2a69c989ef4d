package scorecard

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// What a client's handler heard, read from its events file: a deletion is
// owed only of an object the handler knew, and counts as delivered however
// late it came (a lagging handler is not a losing one).
func TestUndeliveredCountsOnlyDeletionsOfKnownObjects(t *testing.T) {
	end := time.Unix(100, 0)
	path := filepath.Join(t.TempDir(), "events.txt")
	// ns/a: listed, deleted during the fault, its deletion heard after the
	// fault's end. ns/b: listed, deleted, never heard deleted. ns/c: deleted
	// before the client's initial sync, never heard of. ns/d: deleted, but
	// back on the server at the end.
	lines := "A 10 50000000000 ns/a\nA 11 50000000000 ns/b\nA 12 50000000000 ns/d\n" +
		"D 20 150000000000 ns/a\nU 21 160000000000 ns/canary\n"
	if err := os.WriteFile(path, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	ev, err := readEvents(path, end, "ns/canary")
	if err != nil {
		t.Fatal(err)
	}
	if ev.after != 2 || ev.canaryAt != time.Unix(160, 0) {
		t.Errorf("%d events after the end, canary at %v; want 2, 160 s", ev.after, ev.canaryAt)
	}
	server := map[string]string{"ns/d": "30", "ns/canary": "21"}
	if n := undelivered([]string{"ns/a", "ns/b", "ns/c", "ns/d"}, server, ev); n != 1 {
		t.Errorf("%d deletions never delivered, want 1 (ns/b)", n)
	}
}
