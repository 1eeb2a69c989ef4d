package scorecard

import (
	"context"
	"testing"
	"time"

	"rawwatch/compare"
	"rawwatch/internal/controlplane"
)

var shared = &controlplane.Shared{}

func TestMain(m *testing.M) {
	MaybeClientMain() // the clients are this test binary, run again
	shared.Main(m)
}

// The scorecard's own test, against the real control plane: a client that
// re-watches with no backoff must be called stormed, and the raw watcher,
// under the same fault, held; and so the two clients that joined the table
// later, controller-runtime and the informer that strips managedFields
// (their backoff is client-go's reflector's).
func TestScorecardCallsANoBackoffClientStormedAndTheRawWatcherHeld(t *testing.T) {
	cp := shared.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{ControlPlane: cp, Faults: []string{"refuse"}, Kinds: []string{KindNoBackoff, compare.KindRaw, compare.KindControllerRuntime, compare.KindInformerStripped},
		Duration: 6 * time.Second, OutDir: t.TempDir(), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{KindNoBackoff: Stormed, compare.KindRaw: Held, compare.KindControllerRuntime: Held, compare.KindInformerStripped: Held}
	for _, row := range rep.Rows {
		t.Logf("%s %s: %s %s %+v", row.Fault, row.Kind, row.Verdict, row.Why, row.Measure)
		if row.Err != "" {
			t.Fatalf("%s: %s", row.Kind, row.Err)
		}
		if row.Verdict != want[row.Kind] {
			t.Errorf("%s under %s: %s (%s), want %s", row.Kind, row.Fault, row.Verdict, row.Why, want[row.Kind])
		}
	}
	if len(rep.Rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rep.Rows), len(want))
	}
}
