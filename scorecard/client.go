package scorecard

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"rawwatch/compare"
	"rawwatch/faultproxy"
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

// request is one request the client sent: when it began and ended (unix
// ns; End 0: still open), of which sort, how the server answered (Status:
// 0 if no answer came) and whether it failed: an error status, no answer,
// a body cut before its end, an ERROR event in a stream, a stream the
// client gave up before the server ended it (a frame it could not read,
// its watchdog; a LIST's body it closes after the last item has not
// failed). A request's next one is a retry if it failed, else a chain (a
// LIST's WATCH).
type request struct {
	ID         int64 `json:"id"`
	At         int64 `json:"at"`
	End        int64 `json:"end,omitempty"`
	Sort       byte  `json:"sort"`
	Status     int   `json:"status,omitempty"`
	RetryAfter int   `json:"retryAfter,omitempty"` // seconds, from the Retry-After header
	Failed     bool  `json:"failed,omitempty"`
}

// Request sorts: every request the client sends counts.
const (
	sortList      = 'L' // a LIST's first page (a one-item probe too)
	sortPage      = 'P' // a LIST's further page
	sortWatch     = 'W' // a WATCH, in any spelling kube-apiserver takes (faultproxy.KindOf)
	sortWatchList = 'S' // a WATCH with sendInitialEvents
	sortOther     = 'O' // a GET of one object, discovery, a write
)

func sortOf(r *http.Request) byte {
	q := r.URL.Query()
	switch faultproxy.KindOf(r) {
	case faultproxy.Watch:
		if faultproxy.IsTrue(q, "sendInitialEvents") {
			return sortWatchList
		}
		return sortWatch
	case faultproxy.List:
		if q.Get("continue") != "" {
			return sortPage
		}
		return sortList
	}
	return sortOther
}

// requestLog writes every request the client sends to a file as it
// begins and again as it ends (JSON lines, one per record; the reader
// keeps the last record of each ID), so that a client that crashes leaves
// what it did behind.
type requestLog struct {
	mu   sync.Mutex
	next int64
	w    *bufio.Writer
	f    *os.File
}

func newRequestLog(path string) (*requestLog, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &requestLog{f: f, w: bufio.NewWriter(f)}, nil
}

func (l *requestLog) write(q request) {
	b, _ := json.Marshal(q)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w.Write(append(b, '\n'))
}

func (l *requestLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w.Flush()
}

func (l *requestLog) close() error {
	l.flush()
	return l.f.Close()
}

// roundTrip records r and its answer.
func (l *requestLog) roundTrip(rt http.RoundTripper, r *http.Request) (*http.Response, error) {
	l.mu.Lock()
	l.next++
	q := request{ID: l.next, At: time.Now().UnixNano(), Sort: sortOf(r)}
	l.mu.Unlock()
	l.write(q)
	resp, err := rt.RoundTrip(r)
	if err != nil {
		q.End, q.Failed = time.Now().UnixNano(), true
		l.write(q)
		return resp, err
	}
	q.Status = resp.StatusCode
	q.RetryAfter, _ = strconv.Atoi(resp.Header.Get("Retry-After"))
	q.Failed = resp.StatusCode >= 400
	resp.Body = &trackedBody{ReadCloser: resp.Body, q: q, log: l}
	return resp, nil
}

// trackedBody records when its request ended and whether it failed: a
// stream fails at an ERROR event, whose Status's retryAfterSeconds is its
// Retry-After (a WatchList's "Too large resource version" carries it there
// only). It reads the stream's lines as they complete, however the reads
// cut them.
type trackedBody struct {
	io.ReadCloser
	q    request
	log  *requestLog
	once sync.Once

	line     []byte // the stream's line so far
	skipping bool   // the line outgrew maxErrorFrame: no ERROR event
}

// maxErrorFrame: a longer line is an object, not an ERROR event's Status.
const maxErrorFrame = 64 << 10

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.stream() {
		b.scan(p[:n], err != nil)
	}
	if err != nil {
		b.end(!errors.Is(err, io.EOF) && (b.stream() || !errors.Is(err, context.Canceled)))
	}
	return n, err
}

// scan takes in the bytes read; last: the stream ended after them.
func (b *trackedBody) scan(p []byte, last bool) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if !b.skipping {
				b.line = append(b.line, p...)
			}
			break
		}
		if !b.skipping {
			b.frame(append(b.line, p[:i]...))
		}
		b.line, b.skipping, p = b.line[:0], false, p[i+1:]
	}
	if len(b.line) > maxErrorFrame {
		b.line, b.skipping = b.line[:0], true
	}
	if last && len(b.line) > 0 {
		b.frame(b.line)
		b.line = b.line[:0]
	}
}

// frame looks at one line of the stream: an ERROR event fails it.
func (b *trackedBody) frame(line []byte) {
	if !bytes.Contains(line, []byte(`"ERROR"`)) {
		return
	}
	var ev struct {
		Type   string `json:"type"`
		Object struct {
			Details struct {
				RetryAfterSeconds int `json:"retryAfterSeconds"`
			} `json:"details"`
		} `json:"object"`
	}
	if json.Unmarshal(line, &ev) != nil || ev.Type != "ERROR" {
		return
	}
	b.q.Failed = true
	if s := ev.Object.Details.RetryAfterSeconds; s > 0 {
		b.q.RetryAfter = s
	}
}

// Close: the client is done with the body: a LIST read to its last item,
// or a stream given up before its end.
func (b *trackedBody) Close() error {
	b.end(b.stream())
	return b.ReadCloser.Close()
}

func (b *trackedBody) stream() bool { return b.q.Sort == sortWatch || b.q.Sort == sortWatchList }

func (b *trackedBody) end(failed bool) {
	b.once.Do(func() {
		b.q.End = time.Now().UnixNano()
		b.q.Failed = b.q.Failed || failed
		b.log.write(b.q)
	})
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
// writes every call to the events file as it comes ("T RV AT KEY"),
// remembers the last resourceVersion heard of each key and, while slow is
// set, blocks each call that long, on the handler's goroutine: the
// slow-consumer fault. Synced is set once the consumer made its initial
// sync (clients broken on purpose read it).
type handler struct {
	mu     sync.Mutex
	heard  map[string]string
	events *bufio.Writer
	slow   atomic.Int64 // ns
	Synced atomic.Bool
}

func (h *handler) event(typ byte, rv, key string, at int64) {
	h.mu.Lock()
	h.heard[key] = rv
	fmt.Fprintf(h.events, "%c %s %d %s\n", typ, rv, at, key)
	h.mu.Unlock()
	if d := time.Duration(h.slow.Load()); d > 0 {
		time.Sleep(d)
	}
}

func (h *handler) flush() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events.Flush()
}

// consumer is what a client runs: a compare.Consumer, or a client broken
// on purpose.
type consumer interface {
	Run(ctx context.Context, synced chan<- struct{})
	Dump() map[string]string
	Queued() int
	Close() error
}

// brokenClients are clients broken on purpose, by kind: the scorecard's
// tests register them (the client processes of a test are its own binary),
// each to be held to the verdict it deserves.
var brokenClients = map[string]func(cfg *rest.Config, ns string, h *handler) (consumer, error){}

func newClient(kind string, cfg *rest.Config, ns string, h *handler) (consumer, error) {
	if broken, ok := brokenClients[kind]; ok {
		return broken(cfg, ns, h)
	}
	return compare.NewConsumer(kind, cfg, ns, compare.ConsumerConfig{OnEvent: h.event})
}

func clientMain(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("scorecard client", flag.ContinueOnError)
	kind := fs.String("kind", "", "consumer kind")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig (through the fault proxy)")
	ns := fs.String("namespace", "", "namespace")
	dir := fs.String("dir", "", "directory for the events, requests and result files")
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
	reqs, err := newRequestLog(filepath.Join(*dir, requestsFile))
	if err != nil {
		return err
	}
	defer reqs.close()
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) { return reqs.roundTrip(rt, r) })
	})
	events, err := os.Create(filepath.Join(*dir, eventsFile))
	if err != nil {
		return err
	}
	defer events.Close()
	ev := &handler{heard: map[string]string{}, events: bufio.NewWriter(events)}
	c, err := newClient(*kind, cfg, *ns, ev)
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
			// What a crash would leave behind is at most this old.
			reqs.flush()
			ev.flush()
		}
	}()
	go func() {
		select {
		case <-synced:
			ev.Synced.Store(true)
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
	ev.flush()
	if err := c.Close(); err != nil {
		return err
	}
	b, err := json.Marshal(clientResult{Samples: samples})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(*dir, resultFile), b, 0o644)
}

// The files a client writes into its directory.
const (
	requestsFile = "requests.jsonl"
	eventsFile   = "events.txt"
	resultFile   = "result.json"
)

// clientResult is what a client process writes when told to stop.
type clientResult struct {
	Samples []sample `json:"samples"`
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// AnswerTimeout is how long the scorecard waits for the client's process
// to answer (its store, what its handler heard, its stop) before it calls
// it hung.
const AnswerTimeout = 30 * time.Second

// process is a running client process, as the scorecard sees it.
type process struct {
	cmd        *exec.Cmd
	stdin      io.WriteCloser
	dir        string
	stderrPath string
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
	p := &process{dir: dir, stderrPath: filepath.Join(dir, "client.log"), started: time.Now(),
		synced: make(chan struct{}), stores: make(chan map[string]string, 1), heards: make(chan string, 1), done: make(chan struct{})}
	p.cmd = exec.Command(binary, "--kind", kind, "--kubeconfig", kubeconfig, "--namespace", ns, "--dir", dir)
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

// exited: the client's process has ended (waiting a moment for it: a
// client that stopped answering may be ending).
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	case <-time.After(time.Second):
		return false
	}
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
	case <-time.After(AnswerTimeout):
		return "", fmt.Errorf("the client did not answer heard within %v", AnswerTimeout)
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
	case <-time.After(AnswerTimeout):
		return nil, fmt.Errorf("the client did not answer dump within %v", AnswerTimeout)
	}
}

// stop tells the client to stop and reads its result.
func (p *process) stop() (*clientResult, error) {
	fmt.Fprintln(p.stdin, "stop")
	select {
	case <-p.done:
	case <-time.After(AnswerTimeout):
		p.kill()
		return nil, fmt.Errorf("the client did not stop within %v", AnswerTimeout)
	}
	b, err := os.ReadFile(filepath.Join(p.dir, resultFile))
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
