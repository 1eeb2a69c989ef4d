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

// "OPTIONS *" reaches the guard like any request (net/http would answer it
// 200 itself, before the handler): with no token it gets a 401, as
// docs/operations.md says every guarded server answers.
func TestOptionsStarMeetsTheGuard(t *testing.T) {
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
