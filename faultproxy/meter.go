package faultproxy

import (
	"net/http"
	"slices"
	"sync"
	"time"
)

// A Meter counts LIST and WATCH requests, each with its time, so that their
// rate can be read over any stretch: requests a minute while a fault lasted,
// and the most in any one minute. That is how a client is held to a request
// budget — the watcher's is at most 45 LISTs and WATCHes a minute under any
// persistent fault.
//
// A LIST counts once however many pages it takes: the pages after the first
// (a request with a continue token) are counted apart, as Pages.
//
// The proxy meters what reaches it (Proxy.Meter). Wrap meters a client's
// transport instead, which also counts what never reaches the proxy: requests
// to a proxy that refuses connections.
type Meter struct {
	mu       sync.Mutex
	requests []metered
}

type metered struct {
	at   time.Time
	kind Kind // List or Watch
	page bool // a LIST's next page
}

// NewMeter returns a Meter that has counted nothing yet.
func NewMeter() *Meter { return &Meter{} }

// count records r if it is a LIST or a WATCH.
func (m *Meter) count(r *http.Request) {
	k := KindOf(r)
	if k != List && k != Watch {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests = append(m.requests, metered{at: time.Now(), kind: k, page: r.URL.Query().Get("continue") != ""})
}

// Wrap returns a transport that meters every request before rt makes it,
// whatever becomes of it. It fits rest.Config.Wrap:
//
//	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return m.Wrap(rt) })
func (m *Meter) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		m.count(r)
		return rt.RoundTrip(r)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Rate is what a Meter counted from one time to another.
type Rate struct {
	// Lists counts the LISTs started (first pages), Pages the further pages
	// of LISTs, Watches the WATCH requests.
	Lists, Pages, Watches int64
	// Over is the stretch of time they were counted over.
	Over time.Duration
}

// Requests is LISTs and WATCHes: the requests a request budget counts.
func (r Rate) Requests() int64 { return r.Lists + r.Watches }

// PerMinute is n requests over r.Over, as a number a minute.
func (r Rate) PerMinute(n int64) float64 {
	if r.Over <= 0 {
		return 0
	}
	return float64(n) / r.Over.Minutes()
}

// Between counts the requests made from from up to (not including) to.
func (m *Meter) Between(from, to time.Time) Rate {
	r := Rate{Over: to.Sub(from)}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, q := range m.requests {
		switch {
		case q.at.Before(from) || !q.at.Before(to):
		case q.page:
			r.Pages++
		case q.kind == List:
			r.Lists++
		default:
			r.Watches++
		}
	}
	return r
}

// Busiest is the most LISTs and WATCHes (not counting further pages) made
// in any stretch of length window between from and to.
func (m *Meter) Busiest(from, to time.Time, window time.Duration) int {
	var at []time.Time
	m.mu.Lock()
	for _, q := range m.requests {
		if !q.page && !q.at.Before(from) && q.at.Before(to) {
			at = append(at, q.at)
		}
	}
	m.mu.Unlock()
	return BusiestIn(at, window)
}

// BusiestIn is the most of the times at (in any order) that fall in any
// stretch of length window.
func BusiestIn(at []time.Time, window time.Duration) int {
	// Requests made at once may be recorded a little out of order.
	at = slices.Clone(at)
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	// The busiest window can be taken to start at a request.
	most, j := 0, 0
	for i := range at {
		for j < len(at) && at[j].Sub(at[i]) < window {
			j++
		}
		most = max(most, j-i)
	}
	return most
}
