package faultproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WatchListEnd, while on, ends every WatchList (a WATCH with
// sendInitialEvents=true) cleanly right after its first initial event: no
// ERROR, no initial-events-end bookmark, just the end of the stream, as an
// aggregated API server that ignores sendInitialEvents does
// (kubernetes/kubernetes#140890). Other WATCHes pass.
func (p *Proxy) WatchListEnd(on bool) { p.watchListEnd.Store(on) }

// TooLargeRV, while on, answers every LIST and WATCH that asks for a
// resourceVersion (anything but "" and "0") the way an apiserver whose watch
// cache is behind that resourceVersion does: it waits TooLargeWait (the
// apiserver's 3 s for its cache to catch up), then 504 Timeout, "Too large
// resource version", with the ResourceVersionTooLarge cause. A LIST without a
// resourceVersion (a quorum read) passes.
func (p *Proxy) TooLargeRV(on bool) { p.tooLargeRV.Store(on) }

// TooLargeWait is how long TooLargeRV holds a request before answering it.
const TooLargeWait = 3 * time.Second

// Garble, while on, cuts every event frame (ADDED, MODIFIED, DELETED) of
// every WATCH stream in half: the client gets a line that is not JSON.
// Bookmarks and ERRORs pass whole.
func (p *Proxy) Garble(on bool) { p.garble.Store(on) }

// tooLarge answers r with "Too large resource version" if TooLargeRV is on
// and r asks for a resourceVersion; false means r is not for it.
func (p *Proxy) tooLarge(ctx context.Context, w http.ResponseWriter, r *http.Request, k Kind) bool {
	if !p.tooLargeRV.Load() || (k != List && k != Watch) || !fromRV(r) {
		return false
	}
	t := time.NewTimer(TooLargeWait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return true
	}
	p.count.failed.Add(1)
	n, _ := strconv.ParseInt(r.URL.Query().Get("resourceVersion"), 10, 64)
	st := TooLargeStatus(n)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(st.Code))
	_ = json.NewEncoder(w).Encode(st)
	return true
}

// TooLargeStatus is the Status the apiserver answers a request from
// resourceVersion rv with when its watch cache is behind it (as
// k8s.io/apiserver's storage.NewTooLargeResourceVersionError words it).
func TooLargeStatus(rv int64) *metav1.Status {
	return &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  fmt.Sprintf("Too large resource version: %d, current: %d", rv, max(rv-1, 0)),
		Reason:   metav1.StatusReasonTimeout,
		Code:     http.StatusGatewayTimeout,
		Details: &metav1.StatusDetails{RetryAfterSeconds: 1, Causes: []metav1.StatusCause{
			{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}},
	}
}

// garbled is line cut in half if Garble is on and line is an event.
func (p *Proxy) garbled(line []byte) []byte {
	if !p.garble.Load() || !isEvent(line) {
		return line
	}
	return append(bytes.Clone(line[:len(line)/2]), '\n')
}

// isEvent: an ADDED, MODIFIED or DELETED frame.
func isEvent(line []byte) bool {
	h, ok := head(line)
	return ok && (h.Type == "ADDED" || h.Type == "MODIFIED" || h.Type == "DELETED")
}
