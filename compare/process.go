package compare

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"rawwatch/codec"
)

// ConsumerOptions are what the harness tells a consumer process.
type ConsumerOptions struct {
	Kind       string
	Kubeconfig string
	Namespace  string
	// EventsPath receives one line per handler call; ResultPath the Result.
	EventsPath, ResultPath string
	// DropEvery > 0 breaks the consumer on purpose (raw kinds only).
	DropEvery int
	// DropAnnotations are deleted from every object the consumer caches
	// (store.SetTransform, or the informer's SetTransform).
	DropAnnotations []string
	// ProfileDir, if set, receives a heap profile at every mark
	// (KIND-LABEL.heap.pprof), for `go tool pprof`.
	ProfileDir string
	// Wire is the encoding the consumer asks for (newConsumer; "" is
	// JSON).
	Wire codec.Wire
}

// ConsumerResult is what a consumer process reports when it stops.
type ConsumerResult struct {
	Kind     string            `json:"kind"`
	Begin    int64             `json:"begin"`    // unix ns: the consumer started
	SyncedAt int64             `json:"syncedAt"` // unix ns: the initial sync ended
	Requests RequestCounts     `json:"requests"`
	Samples  []MemSample       `json:"samples"`
	Store    map[string]string `json:"store,omitempty"` // key → resourceVersion
	// Bodies are the response-body bytes read, by the encoding their
	// Content-Type names (ByteCounter.Bodies).
	Bodies BodyBytes `json:"bodies"`
}

// The protocol between the harness and a consumer process, one line each:
//
//	consumer → harness (stdout):  synced
//	                              status ADDS UPDATES DELETES RESYNCS STORELEN LISTS PAGES DONELISTS BYTES WIRE  (every 200 ms)
//	                              marked LABEL
//	harness → consumer (stdin):   mark LABEL   (once the queue is empty, force a GC, record the live heap)
//	                              stop         (write the result and exit)
//
// BYTES are the response-body bytes the consumer has read, WIRE the bytes
// read from its connections (its ByteCounter).

// lines returns what a consumer process says to its parent with: one line
// of the protocol, written to w whole, whichever goroutine says it.
func lines(w io.Writer) func(format string, args ...any) {
	w = &lockedWriter{w: w}
	return func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
}

// RunConsumer is the main of a consumer process.
func RunConsumer(opts ConsumerOptions, stdin io.Reader, stdout io.Writer) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", opts.Kubeconfig)
	if err != nil {
		return err
	}
	// Every consumer gets the same client-side limits: generous enough that
	// none of them is throttled by its own client.
	cfg.QPS, cfg.Burst = 200, 400
	if opts.ProfileDir != "" {
		runtime.MemProfileRate = 4096 // fine-grained heap profiles (slower; only when asked)
	}
	rec, err := newRecorder(opts.EventsPath)
	if err != nil {
		return err
	}
	rec.countRequests(cfg)
	wire := &ByteCounter{}
	wire.Install(cfg)
	c, err := newConsumer(opts.Kind, cfg, opts.Namespace, rec, opts.DropEvery, opts.DropAnnotations, opts.Wire)
	if err != nil {
		return err
	}

	say := lines(stdout)
	stopSampling := make(chan struct{})
	go rec.sampleEvery(100*time.Millisecond, stopSampling)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	result := ConsumerResult{Kind: opts.Kind, Begin: time.Now().UnixNano()}
	synced := make(chan struct{})
	done := make(chan struct{})
	go func() { c.run(ctx, synced); close(done) }()
	go func() {
		select {
		case <-synced:
			result.SyncedAt = time.Now().UnixNano()
			say("synced")
		case <-ctx.Done():
		}
	}()
	go func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				say("%s", rec.statusLine(c.storeLen(), c.lists(), wire))
			}
		}
	}()

	in := bufio.NewScanner(stdin)
	for in.Scan() {
		cmd, arg, _ := strings.Cut(in.Text(), " ")
		if cmd == "stop" {
			break
		}
		if cmd == "mark" {
			// A phase's heap is its steady state: the keys the phase queued
			// (10,000 after an initial sync) are worked off first, for up to
			// 10 s, so that neither the queue's keys nor its grown maps count.
			for deadline := time.Now().Add(10 * time.Second); c.queued() > 0 && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			rec.sample(arg)
			if opts.ProfileDir != "" {
				if err := writeHeapProfile(filepath.Join(opts.ProfileDir, opts.Kind+"-"+arg+".heap.pprof")); err != nil {
					return err
				}
			}
			say("marked %s", arg)
		}
	}
	result.Store = c.dump()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	close(stopSampling)
	result.Requests = rec.counts.snapshot()
	result.Bodies = wire.Bodies()
	rec.samplesMu.Lock()
	result.Samples = rec.samples
	rec.samplesMu.Unlock()
	if err := rec.close(); err != nil {
		return err
	}
	b, err := json.Marshal(result)
	if err != nil {
		return err
	}
	return os.WriteFile(opts.ResultPath, b, 0o644)
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.Lookup("heap").WriteTo(f, 0)
}

// consumerProcess is a running consumer process, the harness's or the
// storm's: its stdin takes commands, its stderr goes to a file, and it says
// why it ended.
type consumerProcess struct {
	cmd        *exec.Cmd
	stdin      io.WriteCloser
	stderrPath string
	done       chan struct{} // closed once it has ended

	endMu sync.Mutex
	end   error // why it ended (nil while it runs)
}

// startConsumer starts a consumer process: binary with args, client-go's
// WatchListClient feature on unless kind is KindInformerList, its
// ClientsAllowCBOR feature on if wire is CBOR (without it client-go asks
// for JSON whatever the Accept it is given), its stderr into stderrPath.
// line hears each non-empty line of its stdout, split into fields. When it
// ends, exited says why (an exit without error is still "exited"), then
// done is closed.
func startConsumer(binary string, args []string, kind string, wire codec.Wire, stderrPath string, line func(fields []string)) (*consumerProcess, error) {
	cmd := exec.Command(binary, args...)
	watchList := "true"
	if kind == KindInformerList {
		watchList = "false"
	}
	cmd.Env = append(os.Environ(), "KUBE_FEATURE_WatchListClient="+watchList,
		"KUBE_FEATURE_ClientsAllowCBOR="+strconv.FormatBool(wire == codec.WireCBOR))
	stderr, err := os.Create(stderrPath)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		stderr.Close()
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		stderr.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		stderr.Close()
		return nil, err
	}
	p := &consumerProcess{cmd: cmd, stdin: stdin, stderrPath: stderrPath, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) > 0 {
				line(f)
			}
		}
	}()
	go func() {
		err := cmd.Wait()
		stderr.Close()
		if err == nil {
			err = errors.New("exited")
		}
		p.endMu.Lock()
		p.end = err
		p.endMu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// exited is why the process ended, nil while it runs.
func (p *consumerProcess) exited() error {
	p.endMu.Lock()
	defer p.endMu.Unlock()
	return p.end
}

func (p *consumerProcess) send(line string) { fmt.Fprintln(p.stdin, line) }

// wait waits for the process to end by itself (it was told to stop), and
// kills it after timeout. Ending with a non-zero exit code is an error too.
func (p *consumerProcess) wait(timeout time.Duration) error {
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.kill()
		return errors.New("did not stop")
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		return fmt.Errorf("exit code %d\n%s", code, p.stderrTail())
	}
	return nil
}

// kill kills the process and waits (up to 10 s) until it has ended.
func (p *consumerProcess) kill() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

// stderrTail is the last 15 lines the process wrote to its stderr.
func (p *consumerProcess) stderrTail() string {
	b, _ := os.ReadFile(p.stderrPath)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}
