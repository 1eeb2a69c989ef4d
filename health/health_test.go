package health

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func get(t *testing.T, mux *http.ServeMux, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

// answers fails t unless GET path on mux answers code and body.
func answers(t *testing.T, mux *http.ServeMux, path string, code int, body string) {
	t.Helper()
	if gotCode, gotBody := get(t, mux, path); gotCode != code || gotBody != body {
		t.Errorf("GET %s = %d %q, want %d %q", path, gotCode, gotBody, code, body)
	}
}

// failsUntil is a check that fails saying why until done is set.
func failsUntil(done *atomic.Bool, why string) func() error {
	return func() error {
		if !done.Load() {
			return errors.New(why)
		}
		return nil
	}
}

// A probe is ok when every check passes (or the failing ones are excluded);
// otherwise it fails, listing each check and why the failing ones fail. A
// check may be probed alone by its name; an unknown name is a 404.
func TestAProbeIsOKOnlyWhenEveryCheckIs(t *testing.T) {
	var synced atomic.Bool
	var c Checks
	c.Add("ping", func() error { return nil })
	c.Add("synced", failsUntil(&synced, "waiting for the first list"))
	mux := http.NewServeMux()
	c.Mount(mux, "readyz")

	cases := []struct {
		path string
		code int
		body string
	}{
		{"/readyz", 503, "[+]ping ok\n[-]synced failed: waiting for the first list\nreadyz check failed\n"},
		{"/readyz/ping", 200, "ok\n"},
		{"/readyz/synced", 503, "synced check failed: waiting for the first list\n"},
		{"/readyz/nope", 404, "no readyz check named \"nope\"\n"},
		{"/readyz?exclude=synced", 200, "ok\n"},
	}
	for _, tc := range cases {
		answers(t, mux, tc.path, tc.code, tc.body)
	}

	synced.Store(true)
	answers(t, mux, "/readyz", 200, "ok\n")
	answers(t, mux, "/readyz?verbose", 200, "[+]ping ok\n[+]synced ok\nreadyz check passed\n")
}

// Checks added while being served are picked up (the leader check is added
// once leader election is set up).
func TestACheckAddedWhileServingIsProbed(t *testing.T) {
	var c Checks
	mux := http.NewServeMux()
	c.Mount(mux, "healthz")
	if code, _ := get(t, mux, "/healthz"); code != 200 {
		t.Fatalf("no checks: %d, want 200", code)
	}
	c.Add("leader-election", func() error { return errors.New("lease not renewed for 40s") })
	answers(t, mux, "/healthz", 503, "[-]leader-election failed: lease not renewed for 40s\nhealthz check failed\n")
}

// A passing check says ok and nothing more; a failing one says why.
func TestCheckSaysOkOrWhyNot(t *testing.T) {
	var working atomic.Bool
	var c Checks
	c.Add("shard", failsUntil(&working, "works no slot yet"))
	mux := http.NewServeMux()
	c.Mount(mux, "leaderz")
	answers(t, mux, "/leaderz?verbose", 503, "[-]shard failed: works no slot yet\nleaderz check failed\n")
	working.Store(true)
	answers(t, mux, "/leaderz?verbose", 200, "[+]shard ok\nleaderz check passed\n")
	answers(t, mux, "/leaderz/shard", 200, "ok\n")
}

// The probes are plain HTTP with no token (docs/operations.md), so a
// passing check tells anyone who reaches the port nothing but "ok": the
// sharded replica's shard check (as app/serve.go registers it)
// says why not while it fails, and once it passes /leaderz, /leaderz/shard
// and /leaderz?verbose say only that it is ok, not its slots, the store's
// size or the members' names.
func TestAPassingProbeSaysOnlyOKToAnyCaller(t *testing.T) {
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
		answers(t, mux, path, http.StatusOK, want)
	}
}
