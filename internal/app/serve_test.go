package app

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"rawwatch/internal/authz"
)

// Breaks docs/operations.md ("No token, or one the server does not know:
// 401, always with the body `Unauthorized`") for every guarded server: net/http
// answers "OPTIONS *" itself, before the handler, so the guard never sees it
// and a caller with no token gets 200. Harmless in what it says (no body),
// but the doc's "always" does not hold.
//
// Failure printed: OPTIONS * with no token: "HTTP/1.1 200 OK\r\n", want a 401
func TestAdversaryOptionsStarBypassesTheGuard(t *testing.T) {
	g := authz.NewForClient(fake.NewClientset(), authz.Options{})
	guarded := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "secret") }), "/metrics")
	addr := serveOnLoopback(t, guarded, false, testLimits)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprint(conn, "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n")
	status, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if status != "HTTP/1.1 401 Unauthorized\r\n" {
		t.Errorf("OPTIONS * with no token: %q, want a 401", status)
	}
}
