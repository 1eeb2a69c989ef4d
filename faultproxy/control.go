package faultproxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Every calls fault about every interval (±20% jitter, so that faults do not
// fall in step with the client's own timers) until ctx ends. It is how a
// chaos run schedules faults:
//
//	go faultproxy.Every(ctx, 2*time.Second, func() { p.CutWatches() })
func Every(ctx context.Context, interval time.Duration, fault func()) {
	for {
		jitter := time.Duration((rand.Float64()*0.4 - 0.2) * float64(interval))
		t := time.NewTimer(interval + jitter)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
			fault()
		}
	}
}

// command is one fault a demo can ask for by name.
type command struct {
	args string // what the query may carry, for the help text
	help string
	run  func(p *Proxy, q url.Values) (string, error)
}

var commands = map[string]command{
	"cut": {"", "cut every open WATCH stream mid-way", func(p *Proxy, _ url.Values) (string, error) {
		return fmt.Sprintf("cut %d watch stream(s)", p.CutWatches()), nil
	}},
	"expire": {"", "end every WATCH stream with a 410 Expired ERROR event", func(p *Proxy, _ url.Values) (string, error) {
		return fmt.Sprintf("sent 410 Expired into %d watch stream(s)", p.ExpireWatches()), nil
	}},
	"gone": {"count=1", "answer the next WATCH requests with HTTP 410 Gone", func(p *Proxy, q url.Values) (string, error) {
		n, err := intArg(q, "count", 1)
		p.Fail(Failure{Kinds: Watch, Code: http.StatusGone, Count: n})
		return fmt.Sprintf("the next %d watch request(s) get 410 Gone", n), err
	}},
	"fail": {"code=500 kinds=all count=0 retry-after=0s from-rv=false", "answer requests with an error status (count=0: until heal; from-rv: only those from a resourceVersion)", func(p *Proxy, q url.Values) (string, error) {
		f, err := failureArgs(q)
		if err != nil {
			return "", err
		}
		p.Fail(f)
		return fmt.Sprintf("answering %s requests with %d (retry-after %s, count %d)", f.Kinds, f.Code, f.RetryAfter, f.Count), nil
	}},
	"delay": {"d=1s kinds=all", "hold requests for d before passing them on", func(p *Proxy, q url.Values) (string, error) {
		d, err := durationArg(q, "d", time.Second)
		kinds, err2 := kindsArg(q)
		if err == nil {
			err = err2
		}
		p.Delay(kinds, d)
		return fmt.Sprintf("delaying %s requests by %s", kinds, d), err
	}},
	"refuse": {"for=0s", "refuse connections (for=0s: until accept or heal)", func(p *Proxy, q url.Values) (string, error) {
		d, err := durationArg(q, "for", 0)
		if err != nil {
			return "", err
		}
		if d > 0 {
			p.RefuseFor(d)
			return fmt.Sprintf("refusing connections for %s", d), nil
		}
		p.Refuse()
		return "refusing connections", nil
	}},
	"accept": {"", "accept connections again", func(p *Proxy, _ url.Values) (string, error) {
		return "accepting connections", p.Accept()
	}},
	"garbage": {"", "inject an event that does not decode as a MyResource", func(p *Proxy, _ url.Values) (string, error) {
		return fmt.Sprintf("injected an undecodable event into %d watch stream(s)", p.InjectFrame(UndecodableEvent)), nil
	}},
	"drop": {"types=DELETED", "swallow the server's events of these types (empty: none)", func(p *Proxy, q url.Values) (string, error) {
		var types []string
		for _, t := range strings.Split(q.Get("types"), ",") {
			if t = strings.ToUpper(strings.TrimSpace(t)); t != "" {
				types = append(types, t)
			}
		}
		p.Drop(types...)
		return fmt.Sprintf("dropping events of types %v", types), nil
	}},
	"flap-cut":       switchCommand("flap-cut", "cut every WATCH stream after its first frame", (*Proxy).FlapCut),
	"flap-error":     switchCommand("flap-error", "end every WATCH stream with a 500 ERROR event after its first event", (*Proxy).FlapError),
	"freeze":         switchCommand("freeze", "pass nothing on any WATCH stream (on=false: thaw)", (*Proxy).Freeze),
	"watchlist-fail": switchCommand("watchlist-fail", "end every WatchList with a 500 ERROR event after its first initial event", (*Proxy).WatchListFail),
	"watchlist-end":  switchCommand("watchlist-end", "end every WatchList cleanly after its first initial event, with no initial-events-end bookmark", (*Proxy).WatchListEnd),
	"too-large-rv":   switchCommand("too-large-rv", "as kube-apiserver behind the resourceVersion asked: a WATCH from one silent until switched off, a LIST or WatchList from one 504 \"Too large resource version\" after 3 s", (*Proxy).TooLargeRV),
	"compacted": {"rv=N", "as kube-apiserver compacted at resourceVersion N (0: no more) to a WATCH from an older one: 200, an ERROR event 410, the end", func(p *Proxy, q url.Values) (string, error) {
		rv, err := arg(q, "rv", int64(0), func(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) })
		if err != nil {
			return "", err
		}
		p.CompactedAt(rv)
		if rv <= 0 {
			return "compacted off", nil
		}
		return fmt.Sprintf("compacted at resourceVersion %d", rv), nil
	}},
	"throttle":              switchCommand("throttle", "as API Priority and Fairness shedding the client: every request 429, Retry-After 1", (*Proxy).Throttle),
	"ignore-initial-events": switchCommand("ignore-initial-events", "pass every WatchList on as a plain WATCH from \"\" (a server that ignores sendInitialEvents: no bookmark ends the initial events)", (*Proxy).IgnoreSendInitialEvents),
	"stall": {"", "silence every WATCH stream open now, for good (not even its end passes)", func(p *Proxy, _ url.Values) (string, error) {
		return fmt.Sprintf("stalled %d watch stream(s)", p.StallWatches()), nil
	}},
	"garble": switchCommand("garble", "cut every event frame of every WATCH in half (invalid JSON)", (*Proxy).Garble),
	"heal": {"", "end every lasting fault (fail, delay, drop, refuse, flap-*, freeze, watchlist-*, too-large-rv, compacted, throttle, ignore-initial-events, garble)", func(p *Proxy, _ url.Values) (string, error) {
		return "healed", p.Heal()
	}},
}

// switchCommand is a persistent fault that on=true (the default) switches on
// and on=false off.
func switchCommand(name, help string, set func(*Proxy, bool)) command {
	return command{"on=true", help, func(p *Proxy, q url.Values) (string, error) {
		on, err := arg(q, "on", true, strconv.ParseBool)
		if err != nil {
			return "", err
		}
		set(p, on)
		if on {
			return name + " on", nil
		}
		return name + " off", nil
	}}
}

// Do runs the fault named cmd with its arguments (see Handler for the list).
func (p *Proxy) Do(cmd string, args url.Values) (string, error) {
	c, ok := commands[cmd]
	if !ok {
		return "", fmt.Errorf("unknown fault %q (try: %s)", cmd, strings.Join(commandNames(), ", "))
	}
	return c.run(p, args)
}

func commandNames() []string {
	var names []string
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Handler is the proxy's control surface over HTTP, for demos and humans:
//
//	curl -X POST 'http://ADDR/cut'
//	curl -X POST 'http://ADDR/fail?code=429&retry-after=2s&count=5'
//	curl 'http://ADDR/counts'
//
// GET / lists the faults. Serve it on loopback only: it has no authentication.
func (p *Proxy) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /counts", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(p.Counts())
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, Help()) })
	mux.HandleFunc("POST /{cmd}", func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out, err := p.Do(r.PathValue("cmd"), r.Form)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintln(w, out)
	})
	return mux
}

// Help lists the faults Do and Handler know.
func Help() string {
	var b strings.Builder
	b.WriteString("POST /FAULT?ARGS, one of:\n")
	for _, name := range commandNames() {
		c := commands[name]
		fmt.Fprintf(&b, "  %-14s %-44s %s\n", name, c.args, c.help)
	}
	b.WriteString("GET /counts: what the proxy saw and did (JSON)\n")
	return b.String()
}

// arg reads the query argument name with parse, or gives def when it is absent.
func arg[T any](q url.Values, name string, def T, parse func(string) (T, error)) (T, error) {
	if q.Get(name) == "" {
		return def, nil
	}
	v, err := parse(q.Get(name))
	if err != nil {
		return def, fmt.Errorf("%s: %w", name, err)
	}
	return v, nil
}

func intArg(q url.Values, name string, def int) (int, error) { return arg(q, name, def, strconv.Atoi) }

func durationArg(q url.Values, name string, def time.Duration) (time.Duration, error) {
	return arg(q, name, def, time.ParseDuration)
}

func kindsArg(q url.Values) (Kind, error) {
	if q.Get("kinds") == "" {
		return All, nil
	}
	var k Kind
	for _, name := range strings.Split(q.Get("kinds"), ",") {
		switch strings.TrimSpace(name) {
		case "list", "lists":
			k |= List
		case "watch", "watches":
			k |= Watch
		case "other", "others", "writes":
			k |= Other
		case "all":
			k |= All
		default:
			return All, fmt.Errorf("kinds: unknown kind %q (list, watch, other, all)", name)
		}
	}
	return k, nil
}

func failureArgs(q url.Values) (Failure, error) {
	code, err := intArg(q, "code", http.StatusInternalServerError)
	if err != nil {
		return Failure{}, err
	}
	if code < 400 || code > 599 {
		return Failure{}, fmt.Errorf("code %d is not an error status", code)
	}
	count, err := intArg(q, "count", 0)
	if err != nil {
		return Failure{}, err
	}
	retry, err := durationArg(q, "retry-after", 0)
	if err != nil {
		return Failure{}, err
	}
	fromRV, err := arg(q, "from-rv", false, strconv.ParseBool)
	if err != nil {
		return Failure{}, err
	}
	kinds, err := kindsArg(q)
	return Failure{Kinds: kinds, Code: code, RetryAfter: retry, Count: count, FromRV: fromRV}, err
}
