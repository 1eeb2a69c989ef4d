package app

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"rawwatch/ui"
)

// testLimits are defaultLimits with shorter times.
var testLimits = func() serverLimits {
	l := defaultLimits
	l.readHeader, l.read, l.write, l.idle = 2*time.Second, 5*time.Second, 5*time.Second, time.Second
	return l
}()

// serveOnLoopback serves h with httpServer and l, over TLS when tlsOn, and
// returns the address.
// dialH2 opens a TLS connection to addr that negotiated HTTP/2, closed when
// the test ends.
func dialH2(t *testing.T, addr string) *tls.Conn {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("negotiated %q, want h2", p)
	}
	return conn
}

func serveOnLoopback(t *testing.T, h http.Handler, tlsOn bool, l serverLimits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httpServer(h, context.Background(), klog.Background(), l)
	serve := srv.Serve
	if tlsOn {
		cert, err := selfSigned()
		if err != nil {
			t.Fatal(err)
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
		serve = func(ln net.Listener) error { return srv.ServeTLS(ln, "", "") }
	}
	go serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// closedByServer waits until the server closes conn: nil when it did, an
// error when conn was still open after wait.
func closedByServer(conn net.Conn, wait time.Duration) error {
	conn.SetReadDeadline(time.Now().Add(wait))
	_, err := io.Copy(io.Discard, conn)
	if err == nil || errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "reset by peer") {
		return nil
	}
	return err
}

// No server keeps a connection for ever: an idle HTTP/1.1 connection after
// a request, one that never sends a byte, and an idle HTTP/2 connection are
// all closed within their timeouts; a request line and headers over
// MaxHeaderBytes are refused.
func TestConnectionsAreNotKeptForEver(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	plain := serveOnLoopback(t, ok, false, testLimits)
	var conns []net.Conn
	for range 20 {
		conn, err := net.Dial("tcp", plain)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprint(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("a request: %v %v", resp, err)
		}
		conns = append(conns, conn)
	}
	silent, err := net.Dial("tcp", plain)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	conns = append(conns, silent)
	secure := serveOnLoopback(t, ok, true, testLimits)
	h2 := dialH2(t, secure)
	// The client preface and an empty SETTINGS frame; then nothing.
	if _, err := h2.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")); err != nil {
		t.Fatal(err)
	}
	conns = append(conns, h2)
	errs := make(chan error, len(conns))
	for _, conn := range conns {
		go func() { errs <- closedByServer(conn, 30*time.Second) }()
	}
	open := 0
	for range conns {
		if err := <-errs; err != nil {
			open++
		}
	}
	if open > 0 {
		t.Errorf("%d of %d idle connections (20 HTTP/1.1 after a request, 1 silent, 1 HTTP/2) still open after 30 s", open, len(conns))
	}

	conn, err := net.Dial("tcp", plain)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go fmt.Fprintf(conn, "GET /%s HTTP/1.1\r\nHost: x\r\n\r\n", strings.Repeat("a", 1<<20))
	// The server answers 431 and closes; a client still writing the rest
	// of the line may meet the close first, as a reset (the kernel resets a
	// connection closed with data unread), before it reads the answer.
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	refused := err == nil && resp.StatusCode == http.StatusRequestHeaderFieldsTooLarge ||
		err != nil && strings.Contains(err.Error(), "reset by peer")
	if !refused {
		t.Errorf("a request line of 1 MiB: %v %v, want 431 (or the connection reset while it was still being sent)", resp, err)
	}
}

// The live page's event stream is not a slow request: it outlives the
// servers' read and write timeouts (it extends its own deadlines).
func TestAnEventStreamOutlivesTheServersTimeouts(t *testing.T) {
	h := ui.New(ui.Options{PictureEvery: 50 * time.Millisecond})
	addr := serveOnLoopback(t, h.Handler("/ui/"), false, testLimits)
	resp, err := (&http.Client{Timeout: time.Minute}).Get("http://" + addr + "/ui/events")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /ui/events: %v %v", resp, err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	for until := time.Now().Add(2 * max(testLimits.read, testLimits.write)); time.Now().Before(until); {
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatalf("the stream ended after the servers' timeouts (read %v, write %v): %v", testLimits.read, testLimits.write, err)
		}
	}
}
