package health

import (
	"net/http"
	"strings"
	"sync/atomic"
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
//
// Checks no longer carry info: a passing check says "ok" and nothing else.
// The test now registers the shard check as internal/app/serve.go does,
// with a failure that names why not, and asserts that once it passes the
// probes say exactly "ok" (and "[+]shard ok" with ?verbose).
func TestAdversaryProbesSayMoreThanOK(t *testing.T) {
	var c Checks
	var working atomic.Bool
	c.Add("shard", failsUntil(&working, "works no slot yet (members [rawwatch-0 rawwatch-1])"))
	mux := http.NewServeMux()
	c.Mount(mux, "leaderz")
	if code, body := get(t, mux, "/leaderz/shard"); code != http.StatusServiceUnavailable || !strings.Contains(body, "works no slot yet") {
		t.Errorf("GET /leaderz/shard, not working: %d %q, want 503 saying why not", code, body)
	}
	working.Store(true)
	for path, want := range map[string]string{"/leaderz/shard": "ok\n", "/leaderz?verbose": "[+]shard ok\nleaderz check passed\n", "/leaderz": "ok\n"} {
		if code, body := get(t, mux, path); code != http.StatusOK || body != want {
			t.Errorf("GET %s with no token: %d %q, want only %q", path, code, body, want)
		}
	}
}
