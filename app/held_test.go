package app

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"rawwatch/internal/authz"
)

// heldByGuard serves the guard on loopback (HTTPS, so HTTP/1.1 or HTTP/2)
// in front of an API server that holds every review until the test ends;
// entered and exited count the requests that reached the guard and those
// it answered.
func heldByGuard(t *testing.T) (addr string, entered, exited *atomic.Int32) {
	t.Helper()
	hold := make(chan struct{})
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hold:
		case <-r.Context().Done():
		}
		http.Error(w, "gone", http.StatusServiceUnavailable)
	}))
	t.Cleanup(api.Close)
	t.Cleanup(func() { close(hold) }) // (first: the API server closes once its handlers return)
	guard, err := authz.New(&rest.Config{Host: api.URL}, authz.Options{ReviewTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	entered, exited = new(atomic.Int32), new(atomic.Int32)
	guarded := guard.Wrap(http.NotFoundHandler(), "/metrics")
	addr = serveOnLoopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered.Add(1)
		defer exited.Add(1)
		guarded.ServeHTTP(w, r)
	}), true, defaultLimits)
	return addr, entered, exited
}

// dialTLS opens a TLS connection to addr negotiating proto, closed when
// the test ends.
func dialTLS(t *testing.T, addr, proto string) *tls.Conn {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{proto}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// h2headers is a header block as a HEADERS frame and as many CONTINUATION
// frames as it takes (16 KiB each, the default SETTINGS_MAX_FRAME_SIZE).
func h2headers(stream uint32, block []byte, endStream bool) []byte {
	const max = 16 << 10
	var out []byte
	for first := true; first || len(block) > 0; first = false {
		n := min(max, len(block))
		var flags byte
		if n == len(block) {
			flags |= 4 // END_HEADERS
		}
		typ := byte(9) // CONTINUATION
		if first {
			typ = 1 // HEADERS
			if endStream {
				flags |= 1
			}
		}
		out = append(out, h2frame(typ, flags, stream, block[:n])...)
		block = block[n:]
	}
	return out
}

// hpackBlock is fields as HPACK literals.
func hpackBlock(fields ...[2]string) []byte {
	var b []byte
	for _, f := range fields {
		b = append(b, hpackLiteral(f[0], f[1])...)
	}
	return b
}

// names are n distinct header field names of three letters.
func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%c%c%c", 'a'+i/676%26, 'a'+i/26%26, 'a'+i%26)
	}
	return out
}

// h2preface is what an HTTP/2 client sends first: the preface, its
// SETTINGS (empty) and the ACK of the server's.
func h2preface() []byte {
	out := []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	out = append(out, h2frame(4, 0, 0, nil)...)
	return append(out, h2frame(4, 1, 0, nil)...)
}

// sendH2 opens HTTP/2 connections to addr (closed when the test ends) and
// starts n streams on them, perConn a connection, each stream's frames made
// by stream.
func sendH2(t *testing.T, addr string, n, perConn int, stream func(id uint32) []byte) {
	t.Helper()
	for sent := 0; sent < n; {
		out := h2preface()
		for s := 0; s < perConn && sent < n; s, sent = s+1, sent+1 {
			out = append(out, stream(uint32(2*s+1))...)
		}
		if _, err := dialH2(t, addr).Write(out); err != nil {
			t.Fatal(err)
		}
	}
}

// madeUp is the request header of one made-up token, over HTTP/2.
func madeUp(method string) [][2]string {
	return [][2]string{{":method", method}, {":scheme", "https"}, {":path", "/metrics"}, {":authority", "x"},
		{"authorization", "Bearer one-made-up-token"}}
}

// awaitHeld waits until n requests reached the guard (or those that did
// were all answered, and no more came for a second: the server may close a
// connection on a stream it refused), and returns quiet's goroutines and
// heap.
func awaitHeld(t *testing.T, n int32, entered, exited *atomic.Int32) (goroutines int, heap uint64) {
	t.Helper()
	last, since := int32(-1), time.Now()
	for deadline := time.Now().Add(time.Minute); entered.Load() < n; time.Sleep(10 * time.Millisecond) {
		if e := entered.Load(); e != last {
			last, since = e, time.Now()
		} else if e == exited.Load() && time.Since(since) > time.Second {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d requests reached the guard (%d answered)", entered.Load(), n, exited.Load())
		}
	}
	return quiet()
}

// quiet is the goroutines and the live heap once settled, the least of
// three samples: what finished requests left is going (runtime.GC: twice
// with settled's, for what they left in a sync.Pool).
func quiet() (goroutines int, heap uint64) {
	runtime.GC()
	goroutines, heap, _ = settled()
	for range 2 {
		g, h, _ := settled()
		goroutines, heap = min(goroutines, g), min(heap, h)
	}
	return goroutines, heap
}

// What a request keeps while a review is in flight is bounded whatever it
// carries: the guard refuses a body (413) and a header heavier than
// MaxHeaderWeight (431) before any review, so that each request it holds
// keeps at most 128 KiB of heap (docs/operations.md, package authz). Here
// each request carries what the guard's weight does not count: over
// HTTP/2 a Trailer field declaring thousands of names (net/http moves it
// out of the Header into Request.Trailer, a map of an entry per name,
// before any handler runs), or trailers sent after a header that said
// Content-Length 0 (no body, yet the stream stays open for them); over
// HTTP/1.1 a long method. One made-up token: one review, held, and the
// rest wait on it; what the requests keep is the live heap while they
// wait, less the heap before they were sent, each (answered at once, they
// would keep nothing).
func TestARequestKeepsAtMostItsBoundWhateverTheGuardDoesNotWeigh(t *testing.T) {
	const held, maxBytesPerHeld = 1 + authz.DefaultMaxWaiting, 128 << 10
	// Fields "x-aaa" weigh 5 + 32 bytes each, as the guard counts them: a
	// header as heavy as it lets wait.
	var heavy [][2]string
	var heavyLines strings.Builder
	for _, n := range names((authz.DefaultMaxTokenBytes + authz.DefaultHeaderWeightBeyondToken - 256) / 37) {
		heavy = append(heavy, [2]string{"x-" + n, ""})
		heavyLines.WriteString("x-" + n + ":\r\n")
	}
	var trailers [][2]string
	for _, n := range names(1_750) { // 1,750 x (5 + 32) bytes: under the header list's 64 KiB
		trailers = append(trailers, [2]string{"t-" + n, ""})
	}
	declared := strings.Join(names(5_000), ",") // 20,000 bytes
	for _, c := range []struct {
		what string
		send func(t *testing.T, addr string)
	}{
		{"HTTP/2, a Trailer field declaring 5,000 names", func(t *testing.T, addr string) {
			sendH2(t, addr, held, int(defaultLimits.maxStreams), func(id uint32) []byte {
				return h2headers(id, hpackBlock(append(madeUp("GET"), [2]string{"trailer", declared})...), true)
			})
		}},
		{"HTTP/2, a header as heavy as admitted with Content-Length 0, then 1,750 trailer fields", func(t *testing.T, addr string) {
			sendH2(t, addr, held, int(defaultLimits.maxStreams), func(id uint32) []byte {
				out := h2headers(id, hpackBlock(append(append(madeUp("GET"), [2]string{"content-length", "0"}, [2]string{"trailer", "t-aaa"}), heavy...)...), false)
				return append(out, h2headers(id, hpackBlock(trailers...), true)...)
			})
		}},
		{"HTTP/1.1, a 56 KiB method and a header as heavy as admitted", func(t *testing.T, addr string) {
			for range held {
				if _, err := io.WriteString(dialTLS(t, addr, "http/1.1"), strings.Repeat("G", 56<<10)+" /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer one-made-up-token\r\n"+heavyLines.String()+"\r\n"); err != nil {
					t.Fatal(err)
				}
			}
		}},
	} {
		t.Run(c.what, func(t *testing.T) {
			addr, entered, exited := heldByGuard(t)
			_, before := quiet()
			c.send(t, addr)
			_, heap := awaitHeld(t, held, entered, exited)
			per := (int64(heap) - int64(before)) / held
			t.Logf("%s: %d requests, %d answered at once; %d bytes of heap each", c.what, held, exited.Load(), per)
			if per > maxBytesPerHeld {
				t.Errorf("%s: %d requests (%d answered at once) kept %d bytes of heap each while the review was in flight, want at most %d",
					c.what, held, exited.Load(), per, maxBytesPerHeld)
			}
		})
	}
}

// A request held for a review keeps at most three goroutines: over HTTP/2 a
// caller may open a connection for each request, which then keeps the
// handler's and its connection's two (serve loop, frame reader); over
// HTTP/1.1, two (docs/operations.md).
// One made-up token, its review held: the goroutines while the requests
// wait, less those before they were sent, each.
func TestAnHTTP2RequestOnAConnectionOfItsOwnKeepsAtMostThreeGoroutines(t *testing.T) {
	const held, maxGoroutinesPerHeld = 1 + authz.DefaultMaxWaiting, 3
	addr, entered, exited := heldByGuard(t)
	before, _ := quiet()
	sendH2(t, addr, held, 1, func(id uint32) []byte { return h2headers(id, hpackBlock(madeUp("GET")...), true) })
	goroutines, _ := awaitHeld(t, held, entered, exited)
	more := goroutines - before
	t.Logf("%d requests on a connection each, %d answered at once: %d goroutines more (%.1f each)", held, exited.Load(), more, float64(more)/held)
	// (A few goroutines of the test's own may come and go meanwhile.)
	if more > held*maxGoroutinesPerHeld+8 {
		t.Errorf("%d requests on an HTTP/2 connection each, their review held (%d answered at once), kept %d goroutines (%.1f each), want at most %d each",
			held, exited.Load(), more, float64(more)/held, maxGoroutinesPerHeld)
	}
}
