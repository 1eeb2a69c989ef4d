package faultproxy

import (
	"bytes"
)

// WatchListEnd, while on, ends every WatchList (a WATCH with
// sendInitialEvents=true) cleanly right after its first initial event: no
// ERROR, no initial-events-end bookmark, just the end of the stream, as
// the aggregated API server of kubernetes/kubernetes#140890 did (it
// accepted the WatchList, sent some initial events and closed the stream).
// kube-apiserver itself never answers so. Other WATCHes pass.
func (p *Proxy) WatchListEnd(on bool) { p.watchListEnd.Store(on) }

// StallWatches silences every WATCH stream open now, for good: nothing more
// passes on it, not even its end, whatever the server sends; the
// connection stays up. Streams opened later pass. It returns how many it
// stalled. A stuck intermediary (a proxy or a sidecar) that lost those
// streams does this; only a watchdog of the client's own, or its own
// timeout, ends them.
func (p *Proxy) StallWatches() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := range p.streams {
		s.stalled.Store(true)
	}
	p.count.stalled.Add(int64(len(p.streams)))
	return len(p.streams)
}

// Garble, while on, cuts every event frame (ADDED, MODIFIED, DELETED) of
// every WATCH stream in half: the client gets a line that is not JSON.
// Bookmarks and ERRORs pass whole.
func (p *Proxy) Garble(on bool) { p.garble.Store(on) }

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
