package health

import (
	"net/http"
	"strings"
	"testing"
)

// Breaks docs/operations.md ("Probes. /healthz, /readyz and /leaderz stay
// plain HTTP with no token ... and they say only "ok" or why not"): a passing
// check with info (internal/app/serve.go registers the sharded replica's
// "shard" check so: its slots, how many objects its store holds, the member
// pods' names) tells it to anyone who can reach the probe port, with no
// token, on /leaderz/shard or /leaderz?verbose. The store's size is the
// guarded metric rawwatch_store_objects.
//
// Failure printed: GET /leaderz/shard with no token: 200 "ok: works slots
// [0,4), 1234 objects in its store; members [rawwatch-0 rawwatch-1]\n", want
// only "ok" (and the same for /leaderz?verbose)
func TestAdversaryProbesSayMoreThanOK(t *testing.T) {
	var c Checks
	c.AddWithInfo("shard", func() error { return nil }, func() string {
		return "works slots [0,4), 1234 objects in its store; members [rawwatch-0 rawwatch-1]"
	})
	mux := http.NewServeMux()
	c.Mount(mux, "leaderz")
	for _, path := range []string{"/leaderz/shard", "/leaderz?verbose"} {
		code, body := get(t, mux, path)
		if strings.Contains(body, "objects in its store") || strings.Contains(body, "members") {
			t.Errorf("GET %s with no token: %d %q, want only \"ok\"", path, code, body)
		}
	}
}
