package chaos

import (
	"strings"
	"testing"
	"time"

	"rawwatch/faultproxy"
)

// A fault over the bound, or a controller that did not converge after it,
// fails the measurement, and the table says which.
func TestBudgetReportFailsOverTheBoundOrNotConverged(t *testing.T) {
	r := &BudgetReport{Config: BudgetConfig{Each: time.Minute, Recover: time.Minute, Objects: 10, ChurnRate: 1}, Bound: 45,
		Rows: []BudgetRow{
			{Fault: BudgetFault{Name: "flap-cut"}, Requests: faultproxy.Rate{Watches: 3000, Over: time.Minute}, Busiest: 3000,
				Converged: true, ConvergedIn: time.Second},
			{Fault: BudgetFault{Name: "500"}, Requests: faultproxy.Rate{Lists: 4, Watches: 4, Over: time.Minute}, Busiest: 8,
				Diff: []string{"ns/a missing from the store"}},
			{Fault: BudgetFault{Name: "429"}, Requests: faultproxy.Rate{Lists: 4, Watches: 4, Over: time.Minute}, Busiest: 8,
				Converged: true, ConvergedIn: time.Second},
		}}
	if f := r.Failures(); len(f) != 2 || !strings.Contains(f[0], "flap-cut: 3000") || !strings.Contains(f[1], "500: the store still differed") {
		t.Fatalf("failures %q", f)
	}
	var out strings.Builder
	r.Print(&out)
	for _, want := range []string{"3000.0", "NO (differences: 1)", "BUDGET: FAIL"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the table does not say %q:\n%s", want, out.String())
		}
	}
}
