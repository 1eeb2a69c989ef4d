package watcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	gr         = schema.GroupResource{Group: "example.com", Resource: "myresources"}
	errExpired = apierrors.NewResourceExpired("too old resource version: 2 (216)")
	errGone    = apierrors.NewGone("gone")
	errTooOld  = errors.New(`watch ERROR: too old resource version: 5 (9)`)
	errRefused = fmt.Errorf("dial tcp 127.0.0.1:6443: %w", syscall.ECONNREFUSED)
	err429     = apierrors.NewTooManyRequests("slow down", 7)
	err403     = apierrors.NewForbidden(gr, "", errors.New("RBAC says no"))
	err500     = apierrors.NewInternalError(errors.New("boom"))
	errTooLrg  = &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: 504, Reason: metav1.StatusReasonTimeout,
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge}}},
	}}
)

func TestClassify(t *testing.T) {
	cases := []struct {
		err   error
		class ErrorClass
		after time.Duration
	}{
		{nil, NoError, 0},
		{context.Canceled, Canceled, 0},
		{fmt.Errorf("wrapped: %w", context.Canceled), Canceled, 0},
		{errExpired, Expired, 0},
		{errGone, Expired, 0},
		{apierrors.FromObject(&metav1.Status{Status: "Failure", Code: 410, Reason: "SomethingNew"}), Expired, 0},
		{errTooOld, Expired, 0},
		{errTooLrg, TooLargeRV, 0},
		{err429, Throttled, 7 * time.Second},
		{err403, Denied, 0},
		{apierrors.NewUnauthorized("who are you"), Denied, 0},
		{errRefused, Transient, 0},
		{io.ErrUnexpectedEOF, Transient, 0},
		{err500, Transient, 0},
		{apierrors.NewBadRequest("resourceVersionMatch is forbidden for watch"), Refused, 0},
		{apierrors.NewInvalid(schema.GroupKind{Kind: "ListOptions"}, "", nil), Refused, 0},
	}
	for _, c := range cases {
		class, after := Classify(c.err)
		if class != c.class || after != c.after {
			t.Errorf("Classify(%v) = %s, %v; want %s, %v", c.err, class, after, c.class, c.after)
		}
	}
}

// step is one row of a transition script: an outcome fed to the machine and
// what must come out.
type step struct {
	in       Outcome
	state    State
	rv       string
	listRV   string
	reset    bool
	minDelay time.Duration
}

func run(t *testing.T, m *Machine, steps []step) {
	t.Helper()
	for i, s := range steps {
		from := m.State
		next := m.Step(s.in)
		if m.State != s.state || m.RV != s.rv || m.ListRV() != s.listRV || next.ResetBackoff != s.reset || next.MinDelay != s.minDelay {
			t.Fatalf("step %d from %s with %+v: got state %s rv %q listRV %q reset %v minDelay %v (%s); want %s %q %q %v %v",
				i, from, s.in, m.State, m.RV, m.ListRV(), next.ResetBackoff, next.MinDelay, next.Reason,
				s.state, s.rv, s.listRV, s.reset, s.minDelay)
		}
		if m.State == BackingOff {
			m.BackoffDone()
		}
	}
}

func healthy(rv string, err error) Outcome {
	return Outcome{Op: OpWatch, RV: rv, Events: 3, Duration: 10 * time.Second, Err: err}
}

func TestMachineHappyPath(t *testing.T) {
	m := &Machine{}
	if m.ListRV() != "" {
		t.Fatalf("first list must ask for the latest data, got %q", m.ListRV())
	}
	run(t, m, []step{
		{in: Outcome{Op: OpList, RV: "100"}, state: Watching, rv: "100", listRV: "100"},
		// The server closes the stream at timeoutSeconds: re-watch at once from the last RV.
		{in: healthy("150", nil), state: Watching, rv: "150", listRV: "150", reset: true},
		// A stream with only bookmarks still advances the RV.
		{in: Outcome{Op: OpWatch, RV: "170", Events: 1, Duration: time.Minute}, state: Watching, rv: "170", listRV: "170", reset: true},
	})
	if !m.Synced {
		t.Fatal("not synced after a list")
	}
}

func TestMachineConnectionErrorsRewatchWithoutRelist(t *testing.T) {
	m := &Machine{State: Watching, RV: "100", Synced: true}
	run(t, m, []step{
		// A stream cut after events: re-watch at once, no relist.
		{in: healthy("120", io.ErrUnexpectedEOF), state: Watching, rv: "120", listRV: "120", reset: true},
		// The server is gone: back off, then watch again from the same RV.
		{in: Outcome{Op: OpWatch, Err: errRefused}, state: BackingOff, rv: "120", listRV: "120"},
		{in: Outcome{Op: OpWatch, Err: err500}, state: BackingOff, rv: "120", listRV: "120"},
		// A watch that ends at once with nothing is an error in disguise.
		{in: Outcome{Op: OpWatch, Duration: 10 * time.Millisecond}, state: BackingOff, rv: "120", listRV: "120"},
		// 429 waits at least Retry-After.
		{in: Outcome{Op: OpWatch, Err: err429}, state: BackingOff, rv: "120", listRV: "120", minDelay: 7 * time.Second},
		// 403: back off and keep the RV (nothing is relisted until RBAC is fixed).
		{in: Outcome{Op: OpWatch, Err: err403}, state: BackingOff, rv: "120", listRV: "120"},
	})
	if m.State != Watching {
		t.Fatalf("after backoff the machine must return to Watching, is %s", m.State)
	}
}

func TestMachineExpiredRelists(t *testing.T) {
	m := &Machine{State: Watching, RV: "100", Synced: true}
	run(t, m, []step{
		// ERROR 410 after a healthy stream: relist at once, from the latest
		// data (a list at our old RV could be served at exactly that RV, and
		// a watch from there would expire again).
		{in: healthy("130", errExpired), state: Relisting, rv: "130", listRV: "", reset: true},
		// The relist fails too: back off, still from the latest.
		{in: Outcome{Op: OpList, Err: errExpired}, state: BackingOff, rv: "130", listRV: ""},
		{in: Outcome{Op: OpList, RV: "200"}, state: Watching, rv: "200", listRV: "200"},
		// A healthy watch, then a 410 straight away on a fresh watch (as
		// after an apiserver restart, following failed reconnects): relist
		// at once, not after the backoff the reconnects grew.
		{in: healthy("210", nil), state: Watching, rv: "210", listRV: "210", reset: true},
		{in: Outcome{Op: OpWatch, Err: errRefused}, state: BackingOff, rv: "210", listRV: "210"},
		{in: Outcome{Op: OpWatch, Err: errGone}, state: Relisting, rv: "210", listRV: ""},
		{in: Outcome{Op: OpList, RV: "300"}, state: Watching, rv: "300", listRV: "300"},
		// 410 again before any healthy watch: now back off before relisting.
		{in: Outcome{Op: OpWatch, Err: errGone}, state: BackingOff, rv: "300", listRV: ""},
	})
	if m.State != Relisting {
		t.Fatalf("after backoff the machine must relist, is %s", m.State)
	}
}

// An ERROR event that is not a 410 (here the 500 an apiserver without watch
// cache sends when etcd kept an event but compacted the object before it):
// the server cannot go on from this RV, so relist. A 500 answering the
// WATCH request itself is only a failed request: back off and watch again.
func TestMachineErrorEventsRelist(t *testing.T) {
	prevKV := apierrors.NewInternalError(errors.New("etcd event received with PrevKv=nil"))
	m := &Machine{State: Watching, RV: "224", Synced: true}
	run(t, m, []step{
		{in: Outcome{Op: OpWatch, Err: err500}, state: BackingOff, rv: "224", listRV: "224"},
		{in: Outcome{Op: OpWatch, Err: prevKV, ErrorEvent: true, Duration: 100 * time.Millisecond}, state: Relisting, rv: "224", listRV: ""},
	})
}

func TestMachineListFailures(t *testing.T) {
	m := &Machine{}
	run(t, m, []step{
		{in: Outcome{Op: OpList, Err: errRefused}, state: BackingOff, listRV: ""},
		// An expired continue token on the first list: start over at once...
		{in: Outcome{Op: OpList, Err: errExpired}, state: Listing, listRV: ""},
		// ...and if it happens again, back off before the next try.
		{in: Outcome{Op: OpList, Err: errExpired}, state: BackingOff, listRV: ""},
		{in: Outcome{Op: OpList, Err: err403}, state: BackingOff, listRV: ""},
		{in: Outcome{Op: OpList, RV: "50"}, state: Watching, rv: "50", listRV: "50"},
	})
	m = &Machine{State: Relisting, RV: "90", Synced: true}
	run(t, m, []step{
		// The cache has not caught up with our RV: ask for the latest instead.
		{in: Outcome{Op: OpList, Err: errTooLrg}, state: Relisting, rv: "90", listRV: ""},
		{in: Outcome{Op: OpList, RV: "95"}, state: Watching, rv: "95", listRV: "95"},
	})
}

func TestMachineStops(t *testing.T) {
	for _, op := range []Op{OpList, OpWatch} {
		m := &Machine{State: Watching, RV: "5"}
		m.Step(Outcome{Op: op, Err: context.Canceled})
		if m.State != Stopped {
			t.Fatalf("op %d: state %s after cancel, want Stopped", op, m.State)
		}
	}
}

func TestMachineWatchListFallsBackToListWhenRefused(t *testing.T) {
	m := &Machine{WatchList: true}
	run(t, m, []step{
		{in: Outcome{Op: OpList, Err: apierrors.NewBadRequest("sendInitialEvents is forbidden")}, state: Listing, listRV: ""},
	})
	if m.WatchList {
		t.Fatal("a refused WatchList must switch the machine to LIST for good")
	}
	// A WatchList that fails otherwise keeps trying WatchList.
	m = &Machine{WatchList: true}
	run(t, m, []step{{in: Outcome{Op: OpList, Err: errRefused}, state: BackingOff, listRV: ""}})
	if !m.WatchList {
		t.Fatal("a connection error is no reason to give up WatchList")
	}
	// Without WatchList, a 400 on a LIST is just an error: back off.
	m = &Machine{}
	run(t, m, []step{{in: Outcome{Op: OpList, Err: apierrors.NewBadRequest("bad")}, state: BackingOff, listRV: ""}})
}
