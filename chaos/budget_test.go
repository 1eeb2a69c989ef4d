package chaos

import (
	"context"
	"net/http"
	"net/http/httptest"
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

// The ring's requests on Leases count in the chaos run's budget: a replica
// that renews as package ring does (its Lease's GET and UPDATE, the ring's
// LIST, every renew period) keeps within leaseBound; one that storms the
// Lease API fails the run.
func TestALeaseStormFailsTheRun(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const renew = time.Second
	run := func(every time.Duration, rounds int) Verdict {
		now := t0
		calm := &replica{name: "calm", leases: newLeaseMeter(func() time.Time { return t0 })}
		busy := &replica{name: "r1", leases: newLeaseMeter(func() time.Time { return now })}
		for range rounds {
			for _, req := range []*http.Request{
				httptest.NewRequest(http.MethodGet, "/apis/coordination.k8s.io/v1/namespaces/ns/leases/rawwatch-r1", nil),
				httptest.NewRequest(http.MethodPut, "/apis/coordination.k8s.io/v1/namespaces/ns/leases/rawwatch-r1", nil),
				httptest.NewRequest(http.MethodGet, "/apis/coordination.k8s.io/v1/namespaces/ns/leases", nil),
			} {
				busy.leases.count(req)
			}
			now = now.Add(every)
		}
		var v Verdict
		v.Budget.leases([]*replica{calm, busy}, t0, t0.Add(time.Hour), renew)
		return v
	}
	if v := run(renew, 120); len(v.Failures()) > 0 {
		t.Errorf("a ring renewing every %v for two minutes fails the run: %q", renew, v.Failures())
	} else if b := v.Budget; b.LeaseBusiest != 180 || b.Leases["get"] != 120 || b.Leases["update"] != 120 || b.Leases["list"] != 120 || b.LeaseReplica != "r1" {
		t.Errorf("renewing every %v: busiest minute %d (want 180), by verb %v, replica %s", renew, b.LeaseBusiest, b.Leases, b.LeaseReplica)
	}
	v := run(renew/10, 600) // every 100 ms: a renewal loop that lost its ticker
	if f := v.Failures(); len(f) != 1 || !strings.Contains(f[0], "over the Lease budget: r1 made 1800 requests on Leases in one minute") {
		t.Errorf("a Lease storm: failures %q", f)
	}
}

// Budget looks its faults up by name without a second check (the index
// would be -1 for a name not in BudgetFaults): a name it does not know is
// refused before anything starts, with the names it does.
func TestBudgetRefusesAnUnknownFaultFirst(t *testing.T) {
	_, err := Budget(context.Background(), nil, BudgetConfig{Faults: []string{BudgetFaults[0].Name, "no-such-fault"}})
	if err == nil || !strings.Contains(err.Error(), `unknown fault "no-such-fault"`) {
		t.Fatalf("Budget with an unknown fault: %v, want it refused by name", err)
	}
}
