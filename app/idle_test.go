package app

import (
	"fmt"
	"net/http"
	"testing"
)

// What an idle connection costs is bounded: docs/operations.md says an
// idle one costs about 40 KiB, so that the connections a caller may open
// (bounded in time, not in number) cannot take the process's memory. Over
// HTTP/2 the server reads each frame whole into a buffer its connection
// keeps: a frame of a type it ignores, as large as the server allows,
// sent once after the preface by a caller with no token, and the
// connection then left idle. What each connection keeps: the live heap
// with them open and idle, less the heap before, each (the client's side
// of each TLS connection included, as in the 40 KiB).
func TestAnIdleHTTP2ConnectionKeepsLittle(t *testing.T) {
	const conns, maxBytesPerConn = 16, 128 << 10
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	addr := serveOnLoopback(t, ok, true, defaultLimits)
	big := h2frame(0xfa, 0, 0, make([]byte, 1<<20-1)) // an unknown type: ignored, whatever its length
	_, before := quiet()
	for range conns {
		dialH2(t, addr).Write(append(h2preface(), big...)) // (an error: the server closed it, and it keeps nothing)
	}
	_, heap := quiet()
	per := (int64(heap) - int64(before)) / conns
	t.Logf("%d idle HTTP/2 connections, each sent one 1 MiB frame of an unknown type: %d bytes of heap each", conns, per)
	if per > maxBytesPerConn {
		t.Errorf("%d idle HTTP/2 connections, each sent one 1 MiB frame of an unknown type, kept %d bytes of heap each, want at most %d (docs/operations.md: an idle one costs about 40 KiB)",
			conns, per, maxBytesPerConn)
	}
}
