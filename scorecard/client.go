package scorecard

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"rawwatch/compare"
)

// A client runs in a process of its own, so that client-go's feature gates
// (read once, from the environment) can differ between kinds: informer-list
// is the informer with WatchListClient off. The protocol, one line each:
//
//	client → scorecard (stdout):  synced
//	                              store {"KEY":"RV",...}   (the answer to dump)
//	                              heard RV   (the answer to heard: "" if never)
//	scorecard → client (stdin):   dump
//	                              heard KEY  (the last resourceVersion of KEY
//	                                          the handler heard)
//	                              slow D  (from now on every handler call
//	                                       blocks for D; slow 0s: no more)
//	                              stop   (write the result file and exit)
//
// What the client logs goes to its stderr, which the scorecard keeps.

// ClientEnv is the environment variable that makes a binary that calls
// MaybeClientMain first run as a client.
const ClientEnv = "RAWWATCH_SCORECARD_CLIENT"

// MaybeClientMain runs the client and exits if ClientEnv is set; a main (or
// a TestMain) calls it first.
func MaybeClientMain() {
	if os.Getenv(ClientEnv) == "" {
		return
	}
	if err := clientMain(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "scorecard client:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// request is one request the client sent: when, and of which sort.
type request struct {
	At   int64 `json:"at"` // unix ns
	Sort byte  `json:"sort"`
}

// Request sorts.
const (
	sortList      = 'L' // a LIST's first page (a one-item probe too)
	sortPage      = 'P' // a LIST's further page
	sortWatch     = 'W'
	sortWatchList = 'S' // a WATCH with sendInitialEvents
)

func sortOf(r *http.Request) (byte, bool) {
	if r.Method != http.MethodGet {
		return 0, false
	}
	q := r.URL.Query()
	switch {
	case q.Get("watch") == "true" && q.Get("sendInitialEvents") == "true":
		return sortWatchList, true
	case q.Get("watch") == "true":
		return sortWatch, true
	case q.Get("continue") != "":
		return sortPage, true
	case strings.HasSuffix(strings.TrimSuffix(r.URL.Path, "/"), "/myresources"):
		return sortList, true
	}
	return 0, false
}

// clientResult is what a client process writes when told to stop.
type clientResult struct {
	Requests []request `json:"requests"`
	Samples  []sample  `json:"samples"`
}

// sample is one reading of the client process, every sampleEvery: its heap
// in use and the keys waiting in its workqueue.
type sample struct {
	At        int64  `json:"at"` // unix ns
	HeapInuse uint64 `json:"heapInuse"`
	Queued    int    `json:"queued"`
}

const sampleEvery = 250 * time.Millisecond

// handler is what the client adds to its consumer's event handler: it
// remembers the last resourceVersion heard of each key and, while slow is
// set, blocks each call that long, on the handler's goroutine: the
// slow-consumer fault.
type handler struct {
	mu    sync.Mutex
	heard map[string]string
	slow  atomic.Int64 // ns
}

func (h *handler) event(_ byte, rv, key string, _ int64) {
	h.mu.Lock()
	h.heard[key] = rv
	h.mu.Unlock()
	if d := time.Duration(h.slow.Load()); d > 0 {
		time.Sleep(d)
	}
}

func clientMain(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("scorecard client", flag.ContinueOnError)
	kind := fs.String("kind", "", "consumer kind")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig (through the fault proxy)")
	ns := fs.String("namespace", "", "namespace")
	events := fs.String("events", "", "events file")
	result := fs.String("result", "", "result file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	// As in the comparison harness: limits no client is held back by, so
	// that what spaces its requests is its own backoff.
	cfg.QPS, cfg.Burst = 200, 400
	var mu sync.Mutex
	var reqs []request
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if s, ok := sortOf(r); ok {
				mu.Lock()
				reqs = append(reqs, request{At: time.Now().UnixNano(), Sort: s})
				mu.Unlock()
			}
			return rt.RoundTrip(r)
		})
	})
	ev := &handler{heard: map[string]string{}}
	c, err := compare.NewConsumer(*kind, cfg, *ns, compare.ConsumerConfig{OnEvent: ev.event, EventsPath: *events})
	if err != nil {
		return err
	}
	var outMu sync.Mutex
	say := func(line string) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintln(stdout, line)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	synced, done := make(chan struct{}), make(chan struct{})
	go func() { c.Run(ctx, synced); close(done) }()
	var samples []sample
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for ; ctx.Err() == nil; time.Sleep(sampleEvery) {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			samples = append(samples, sample{At: time.Now().UnixNano(), HeapInuse: ms.HeapInuse, Queued: c.Queued()})
		}
	}()
	go func() {
		select {
		case <-synced:
			say("synced")
		case <-ctx.Done():
		}
	}()
	in := bufio.NewScanner(stdin)
	for in.Scan() && in.Text() != "stop" {
		if d, ok := strings.CutPrefix(in.Text(), "slow "); ok {
			if slow, err := time.ParseDuration(d); err == nil {
				ev.slow.Store(int64(slow))
			}
		}
		if key, ok := strings.CutPrefix(in.Text(), "heard "); ok {
			ev.mu.Lock()
			rv := ev.heard[key]
			ev.mu.Unlock()
			say("heard " + rv)
		}
		if in.Text() == "dump" {
			b, err := json.Marshal(c.Dump())
			if err != nil {
				return err
			}
			say("store " + string(b))
		}
	}
	ev.slow.Store(0)
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		return errors.New("the consumer did not stop within 10 s")
	}
	<-sampled
	if err := c.Close(); err != nil {
		return err
	}
	mu.Lock()
	b, err := json.Marshal(clientResult{Requests: reqs, Samples: samples})
	mu.Unlock()
	if err != nil {
		return err
	}
	return os.WriteFile(*result, b, 0o644)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// process is a running client process, as the scorecard sees it.
type process struct {
	cmd        *exec.Cmd
	stdin      io.WriteCloser
	stderrPath string
	resultPath string
	started    time.Time
	syncedAt   time.Time // set before synced is closed
	synced     chan struct{}
	stores     chan map[string]string
	heards     chan string
	done       chan struct{}
}

// startClient starts binary as a client of kind (client-go's WatchListClient
// on unless kind is informer-list, as in the comparison harness).
func startClient(binary, kind, kubeconfig, ns, dir string) (*process, error) {
	p := &process{stderrPath: dir + "/client.log", resultPath: dir + "/result.json", started: time.Now(),
		synced: make(chan struct{}), stores: make(chan map[string]string, 1), heards: make(chan string, 1), done: make(chan struct{})}
	p.cmd = exec.Command(binary, "--kind", kind, "--kubeconfig", kubeconfig, "--namespace", ns,
		"--events", dir+"/events.txt", "--result", p.resultPath)
	watchList := "true"
	if kind == compare.KindInformerList {
		watchList = "false"
	}
	p.cmd.Env = append(os.Environ(), ClientEnv+"=1", "KUBE_FEATURE_WatchListClient="+watchList)
	stderr, err := os.Create(p.stderrPath)
	if err != nil {
		return nil, err
	}
	p.cmd.Stderr = stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		stderr.Close()
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "synced":
				p.syncedAt = time.Now()
				close(p.synced)
			case strings.HasPrefix(line, "store "):
				var m map[string]string
				if json.Unmarshal([]byte(strings.TrimPrefix(line, "store ")), &m) == nil {
					p.stores <- m
				}
			case line == "heard" || strings.HasPrefix(line, "heard "):
				p.heards <- strings.TrimPrefix(strings.TrimPrefix(line, "heard"), " ")
			}
		}
	}()
	go func() { _ = p.cmd.Wait(); stderr.Close(); close(p.done) }()
	return p, nil
}

// waitSynced waits for the client's initial sync.
func (p *process) waitSynced(timeout time.Duration) error {
	select {
	case <-p.synced:
		return nil
	case <-p.done:
		return fmt.Errorf("the client exited before its sync: %s", tail(p.stderrPath))
	case <-time.After(timeout):
		return fmt.Errorf("the client did not sync within %v", timeout)
	}
}

// slow makes every handler call of the client block for d (0: no more).
func (p *process) slow(d time.Duration) error {
	_, err := fmt.Fprintf(p.stdin, "slow %s\n", d)
	return err
}

// heard asks the client for the last resourceVersion of key its handler
// heard ("" if none).
func (p *process) heard(key string) (string, error) {
	if _, err := fmt.Fprintln(p.stdin, "heard "+key); err != nil {
		return "", err
	}
	select {
	case rv := <-p.heards:
		return rv, nil
	case <-p.done:
		return "", fmt.Errorf("the client exited: %s", tail(p.stderrPath))
	case <-time.After(30 * time.Second):
		return "", errors.New("the client did not answer heard within 30 s")
	}
}

// store asks the client for its store.
func (p *process) store() (map[string]string, error) {
	if _, err := fmt.Fprintln(p.stdin, "dump"); err != nil {
		return nil, err
	}
	select {
	case m := <-p.stores:
		return m, nil
	case <-p.done:
		return nil, fmt.Errorf("the client exited: %s", tail(p.stderrPath))
	case <-time.After(30 * time.Second):
		return nil, errors.New("the client did not answer dump within 30 s")
	}
}

// stop tells the client to stop and reads its result.
func (p *process) stop() (*clientResult, error) {
	fmt.Fprintln(p.stdin, "stop")
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.kill()
		return nil, errors.New("the client did not stop within 30 s")
	}
	b, err := os.ReadFile(p.resultPath)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, tail(p.stderrPath))
	}
	var r clientResult
	return &r, json.Unmarshal(b, &r)
}

func (p *process) kill() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
	}
	<-p.done
}

// tail is the last lines of a file, for an error message.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(len(lines)-5, 0):], "\n")
}

// KindNoBackoff is a client broken on purpose (compare.KindNoBackoff): it
// re-watches at once, forever. The scorecard must call it stormed; its own
// test holds it to that.
const KindNoBackoff = compare.KindNoBackoff
