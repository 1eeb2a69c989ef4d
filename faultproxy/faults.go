package faultproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Failure makes the proxy answer requests itself with an error, worded as the
// apiserver words it (a Status object), instead of passing them on.
type Failure struct {
	// Kinds selects the requests to fail (0 means All).
	Kinds Kind
	// Code is the HTTP status: 410 Gone (reason Expired), 429 Too Many
	// Requests, 500 Internal Server Error, 503 Service Unavailable, ...
	Code int
	// RetryAfter, when positive, is sent as the Retry-After header and as the
	// Status's details.retryAfterSeconds (whole seconds, rounded up), as the
	// apiserver's priority and fairness does with a 429.
	RetryAfter time.Duration
	// Count is how many requests to fail; 0 means every one until Heal.
	Count int
	// FromRV fails only the requests that ask for a resourceVersion
	// (anything but "" and "0"), as a compaction does: a 410 answers a
	// resume from an old resourceVersion, never a request for the latest
	// state.
	FromRV bool
}

// Fail starts answering requests with f, replacing any earlier Failure.
func (p *Proxy) Fail(f Failure) {
	if f.Kinds == 0 {
		f.Kinds = All
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failure = &f
}

// Delay holds every request of the given kinds for d before passing it on
// (for a WATCH: before the stream opens). d = 0 ends the delay.
func (p *Proxy) Delay(kinds Kind, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range []Kind{List, Watch, Other} {
		if kinds&k != 0 {
			p.delay[k] = d
		}
	}
}

// FlapCut, while on, cuts every WATCH stream right after the first frame it
// passes on (an event or a bookmark): the client gets one frame, then a broken
// stream, on every WATCH. A stream already open is cut after its next frame.
// A client that takes "it delivered something" for "it was healthy"
// re-watches at once, forever.
func (p *Proxy) FlapCut(on bool) { p.flapCut.Store(on) }

// FlapError, while on, ends every WATCH stream after the first event it passes
// on with an ERROR event carrying a 500 Status (InternalErrorEvent), then the
// end of the stream, as the apiserver does when it cannot go on. The client
// must relist, and a client that relists at once does so forever.
func (p *Proxy) FlapError(on bool) { p.flapError.Store(on) }

// WatchListFail, while on, ends every WatchList (a WATCH with
// sendInitialEvents=true) after its first initial event, before the
// initial-events-end bookmark, with InternalErrorEvent. Other WATCHes, and
// a WatchList's live events after the bookmark, pass.
func (p *Proxy) WatchListFail(on bool) { p.watchListFail.Store(on) }

// Freeze, while on, passes nothing on any WATCH stream: no event, no bookmark,
// no injected frame. Streams stay open (new ones open too, headers and all)
// and hold the server's frames, which go on, in order, when Freeze(false)
// thaws them; until then only the client giving up, or a cut, ends a stream.
// LISTs and other requests pass.
func (p *Proxy) Freeze(on bool) { p.gate(&p.thaw, on) }

// gate opens *c (a fault is on: its waiters wait) or closes it (the fault
// is over: they go on).
func (p *Proxy) gate(c *chan struct{}, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && *c == nil:
		*c = make(chan struct{})
	case !on && *c != nil:
		close(*c)
		*c = nil
	}
}

// frozen returns the channel a frozen stream waits on, or nil.
func (p *Proxy) frozen() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.thaw
}

// Heal ends every lasting fault: failures, delays, dropped events, a
// refusal, flapping, a freeze, failing, ending or ignored WatchLists (the
// streams it answered are cut), too large resourceVersions, compacted
// ones, throttling and garbled frames. (Cuts, stalls and injected frames
// are one-off: there is nothing to end.)
func (p *Proxy) Heal() error {
	p.mu.Lock()
	p.failure = nil
	p.delay = map[Kind]time.Duration{}
	p.drop = map[string]bool{}
	for s := range p.streams {
		if s.ignoring {
			s.cancel()
			p.count.cut.Add(1)
		}
	}
	p.mu.Unlock()
	p.CompactedAt(0)
	p.Throttle(false)
	p.IgnoreSendInitialEvents(false)
	p.FlapCut(false)
	p.FlapError(false)
	p.WatchListFail(false)
	p.WatchListEnd(false)
	p.TooLargeRV(false)
	p.Garble(false)
	p.Freeze(false)
	return p.Accept()
}

// takeFailure returns the failure to answer r, of kind k, with, if any.
func (p *Proxy) takeFailure(r *http.Request, k Kind) (Failure, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.failure
	if f == nil || f.Kinds&k == 0 || (f.FromRV && !fromRV(r)) {
		return Failure{}, false
	}
	if f.Count > 0 {
		f.Count--
		if f.Count == 0 {
			p.failure = nil
		}
	}
	return *f, true
}

// wait applies the delay for kind k; false means the client went away.
func (p *Proxy) wait(ctx context.Context, k Kind) bool {
	p.mu.Lock()
	d := p.delay[k]
	p.mu.Unlock()
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// write answers a request with the failure's Status.
func (f Failure) write(w http.ResponseWriter) {
	status := f.status()
	if f.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(status.Details.RetryAfterSeconds)))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(status.Code))
	_ = json.NewEncoder(w).Encode(status)
}

// status builds the Status the apiserver would send for f.Code.
func (f Failure) status() *metav1.Status {
	secs := int((f.RetryAfter + time.Second - 1) / time.Second)
	gr := schema.GroupResource{}
	var err *apierrors.StatusError
	switch f.Code {
	case http.StatusGone:
		err = apierrors.NewResourceExpired("too old resource version (faultproxy answered 410 Gone)")
	case http.StatusTooManyRequests:
		err = apierrors.NewTooManyRequests("too many requests (faultproxy)", secs)
	case http.StatusInternalServerError:
		err = apierrors.NewInternalError(errors.New("faultproxy answered 500"))
	case http.StatusServiceUnavailable:
		err = apierrors.NewServiceUnavailable("faultproxy answered 503")
	default:
		err = apierrors.NewGenericServerResponse(f.Code, "get", gr, "", fmt.Sprintf("faultproxy answered %d", f.Code), secs, true)
	}
	st := err.Status()
	st.Kind, st.APIVersion = "Status", "v1"
	if secs > 0 {
		if st.Details == nil {
			st.Details = &metav1.StatusDetails{}
		}
		st.Details.RetryAfterSeconds = int32(secs)
	}
	return &st
}

// fromRV: r asks for a resourceVersion other than "" (the latest, a quorum
// read) and "0" (any).
func fromRV(r *http.Request) bool {
	rv := r.URL.Query().Get("resourceVersion")
	return rv != "" && rv != "0"
}
