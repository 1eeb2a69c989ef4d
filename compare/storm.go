package compare

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/codec"
)

// StormKinds are the consumers a storm compares, in report order.
// informer-stripped is left out: it sends what informer sends (its transform
// runs after the decode), so it costs the apiserver the same.
var StormKinds = []string{KindRaw, KindRawWatchList, KindInformer, KindInformerList, KindControllerRuntime}

// StormOptions configure a relist storm: M clients of one kind, all synced,
// lose their apiserver at once and relist from the restarted one.
type StormOptions struct {
	// Kubeconfig and RestartAPIServer: a server and how to restart it. With
	// Kubeconfig "" RunStorm starts a local control plane and restarts its
	// apiserver itself.
	Kubeconfig       string
	RestartAPIServer func(context.Context) error
	// APIServerPID, if set, gives the running apiserver's process id (0:
	// none), for the kernel's peak of its resident set (peakRSS), which no
	// sampling gap hides. Set by RunStorm when it starts the control plane.
	APIServerPID func() int
	// Objects is N (default 10,000), Payload each object's filler annotation
	// (bytes), Writers the load generator's parallelism (default 16).
	Objects, Payload, Writers int
	// Clients is M, the clients of one kind in the consumer process (default 50).
	Clients int
	// ClientQPS and ClientBurst are each client's own limits (default 200
	// and 400: a relist of 10,000 objects is at most 21 requests a client).
	ClientQPS   float32
	ClientBurst int
	// Kinds to run, one after the other (default StormKinds).
	Kinds []string
	// Interval between apiserver samples (default 100 ms); Tail how long to
	// keep sampling after the last client relisted (default 3 s), for the chart.
	Interval, Tail time.Duration
	// Baseline restarts the apiserver once with no client first, to show
	// what a restart alone costs (BaselineFor long), its watch cache of the
	// objects included (one one-item LIST starts it).
	Baseline    bool
	BaselineFor time.Duration
	// SyncTimeout bounds the initial sync of the M clients, RelistTimeout
	// the relist after the restart (default 10 and 5 minutes).
	SyncTimeout, RelistTimeout time.Duration
	OutDir                     string
	// Binary runs "BINARY storm-consume ..." (default: this executable).
	Binary   string
	Progress io.Writer
}

// StormReport is the outcome of RunStorm.
type StormReport struct {
	Date        string  `json:"date"`
	GoVersion   string  `json:"goVersion"`
	CPUs        int     `json:"cpus"`
	Objects     int     `json:"objects"`
	Payload     int     `json:"payloadBytes"`
	Clients     int     `json:"clients"`
	ClientQPS   float32 `json:"clientQPS"`
	ClientBurst int     `json:"clientBurst"`
	IntervalMs  float64 `json:"sampleIntervalMs"`
	// Baseline is a restart with no client (if asked for).
	Baseline *StormMode  `json:"baseline,omitempty"`
	Modes    []StormMode `json:"modes"`
	// Ratios of the peaks the issue sets targets for.
	Targets    []Target `json:"targets"`
	AllCorrect bool     `json:"allCorrect"`
}

// StormMode is one kind's storm.
type StormMode struct {
	Kind string `json:"kind"`
	// InitialSyncSeconds: process start → all M clients synced.
	InitialSyncSeconds float64 `json:"initialSyncSeconds"`
	// RestartSeconds: apiserver killed → the harness's readiness poll
	// succeeded; RelistSeconds: killed → the last of the M clients relisted
	// (its cache whole again), which can come before that poll does.
	RestartSeconds float64 `json:"restartSeconds"`
	RelistSeconds  float64 `json:"relistSeconds"`
	// RelistedClients of Clients finished a relist before RelistTimeout.
	RelistedClients int `json:"relistedClients"`
	// Apiserver peaks from the restarted apiserver's being ready until the
	// last relist (bytes; a scrape answered just after the kill is the old
	// apiserver's), and the 429s it counted itself.
	PeakRSS  float64 `json:"peakRSS"`
	PeakHeap float64 `json:"peakHeap"`
	// HighWaterRSS is the restarted apiserver's peak resident set as the
	// kernel kept it (VmHWM), read once every client has relisted: the
	// true peak since the restart, sampled or not (0 if unknown).
	HighWaterRSS float64 `json:"highWaterRSS,omitempty"`
	// PeakLive is the highest live heap (what a GC kept; APIServerSample)
	// in that time, Allocated the bytes the restarted apiserver allocated
	// until the last relist (its counter starts from zero).
	PeakLive  float64 `json:"peakLiveHeap"`
	Allocated float64 `json:"allocated"`
	// PeakWatches is the most WATCH requests the apiserver served at once
	// in that time (every client's, the WatchLists included): how close
	// together the clients came back.
	PeakWatches     float64 `json:"peakWatches"`
	ServerThrottled float64 `json:"serverThrottled"`
	// Restarted: the apiserver's own request counter went down across the
	// kill (a new process counts from zero).
	Restarted bool `json:"restarted"`
	// Requests the clients sent during the storm (from just before the kill
	// until every client had relisted).
	Requests StormRequests `json:"requests"`
	// ConsumerMaxRSS is the consumer process's peak RSS (bytes), for scale.
	ConsumerMaxRSS int64 `json:"consumerMaxRSS"`
	// Correct: every client ended holding exactly the server's objects.
	Correct   bool          `json:"correct"`
	Incorrect string        `json:"incorrect,omitempty"`
	Clients   []StormClient `json:"clients"`
	// ScrapeErrs: failed apiserver scrapes during this mode (its initial
	// sync included), by kind of failure.
	ScrapeErrs map[string]int `json:"scrapeErrors"`
	// Series: seconds since the kill → apiserver RSS and heap in use (MiB),
	// from 2 s before the kill to Tail after the last relist.
	Series [][3]float64 `json:"series"`
	// Times, unix ns.
	KilledAt, ReadyAt, DoneAt int64 `json:"-"`
}

// RunStorm runs one storm per kind and returns the report.
func RunStorm(ctx context.Context, opts StormOptions) (*StormReport, error) {
	if opts.Objects == 0 {
		opts.Objects = 10000
	}
	if opts.Clients == 0 {
		opts.Clients = 50
	}
	if opts.Objects < 0 || opts.Clients < 0 {
		return nil, errors.New("storm: objects and clients must be positive")
	}
	if opts.Writers == 0 {
		opts.Writers = 16
	}
	if opts.ClientQPS == 0 {
		opts.ClientQPS, opts.ClientBurst = 200, 400
	}
	if len(opts.Kinds) == 0 {
		opts.Kinds = StormKinds
	}
	if opts.Interval == 0 {
		opts.Interval = 100 * time.Millisecond
	}
	if opts.Tail == 0 {
		opts.Tail = 3 * time.Second
	}
	if opts.BaselineFor == 0 {
		opts.BaselineFor = 10 * time.Second
	}
	if opts.SyncTimeout == 0 {
		opts.SyncTimeout = 10 * time.Minute
	}
	if opts.RelistTimeout == 0 {
		opts.RelistTimeout = 5 * time.Minute
	}
	if err := outputs(&opts.Binary, &opts.Progress, opts.OutDir); err != nil {
		return nil, err
	}
	s := &storm{bench: bench{progress: opts.Progress, start: time.Now()}, opts: opts}
	defer s.cleanup()
	if err := s.connect(ctx); err != nil {
		return nil, err
	}
	return s.run(ctx)
}

type storm struct {
	bench
	opts     StormOptions
	sampler  *APIServerSampler
	failures map[string]int // the sampler's failures as of the last measure
	child    *stormChild
}

func (s *storm) connect(ctx context.Context) error {
	// A local control plane's apiserver restarts; the kubeconfig's needs RestartAPIServer.
	if s.opts.Kubeconfig != "" && s.opts.RestartAPIServer == nil {
		return errors.New("storm: no way to restart the apiserver (RestartAPIServer)")
	}
	cfg, err := s.bench.connect(ctx, s.opts.Kubeconfig, false, fmt.Sprintf("storm-%d", time.Now().UnixNano()))
	if s.cp != nil {
		s.opts.RestartAPIServer, s.opts.APIServerPID = s.cp.APIServer.Restart, s.cp.APIServer.PID
	}
	if err != nil {
		return err
	}
	if s.sampler, err = NewAPIServerSampler(cfg); err != nil {
		return err
	}
	// A storm keeps the apiserver and the machine busy: a scrape is given
	// longer than the sampler's default before it counts as failed.
	s.sampler.client.Timeout = 10 * time.Second
	load := &Load{Client: s.client, Namespace: s.namespace, Writers: s.opts.Writers, Payload: s.opts.Payload, Progress: s.opts.Progress}
	s.logf("creating %d objects of %d payload bytes in %s", s.opts.Objects, s.opts.Payload, s.namespace)
	_, err = load.Create(ctx, s.opts.Objects)
	return err
}

func (s *storm) cleanup() {
	if s.child != nil {
		s.child.kill()
	}
	s.bench.cleanup()
}

func (s *storm) run(ctx context.Context) (*StormReport, error) {
	r := &StormReport{
		Date: time.Now().UTC().Format(time.RFC3339), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(),
		Objects: s.opts.Objects, Payload: s.opts.Payload, Clients: s.opts.Clients,
		ClientQPS: s.opts.ClientQPS, ClientBurst: s.opts.ClientBurst, IntervalMs: float64(s.opts.Interval) / 1e6,
	}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	var sampling sync.WaitGroup
	sampling.Go(func() { s.sampler.Run(sampleCtx, s.opts.Interval) })
	defer sampling.Wait()
	defer stopSampling()

	if s.opts.Baseline {
		m, err := s.baseline(ctx)
		if err != nil {
			return nil, err
		}
		r.Baseline = m
	}
	for _, kind := range s.opts.Kinds {
		m, err := s.mode(ctx, kind)
		if err != nil {
			return nil, fmt.Errorf("storm %s: %w", kind, err)
		}
		r.Modes = append(r.Modes, *m)
	}
	r.AllCorrect = len(r.Modes) > 0
	for _, m := range r.Modes {
		r.AllCorrect = r.AllCorrect && m.Correct
	}
	r.Targets = stormTargets(r)
	return r, nil
}

func (s *storm) baseline(ctx context.Context) (*StormMode, error) {
	s.logf("baseline: restarting the apiserver with no client")
	m := &StormMode{Kind: "none", Correct: true}
	var err error
	if m.KilledAt, m.ReadyAt, err = restartSampled(ctx, s.sampler, s.opts.RestartAPIServer); err != nil {
		return nil, err
	}
	// A CRD's storage, and with it the watch cache of its objects, starts
	// on the first request for the resource, not with the apiserver: one
	// one-item LIST, so that the baseline holds what every kind pays (for
	// 10,000 objects of 16 KiB, about 270 MiB of heap).
	for try := 0; ; try++ {
		if _, err = s.client.List(ctx, s.namespace, metav1.ListOptions{Limit: 1}); err == nil {
			break
		}
		if try == 30 {
			return nil, fmt.Errorf("baseline: the first LIST after the restart: %w", err)
		}
		time.Sleep(time.Second)
	}
	time.Sleep(s.opts.BaselineFor)
	m.DoneAt = time.Now().UnixNano()
	m.HighWaterRSS = s.highWater()
	s.measure(m)
	return m, nil
}

func (s *storm) mode(ctx context.Context, kind string) (*StormMode, error) {
	m := &StormMode{Kind: kind}
	s.logf("%s: starting %d clients", kind, s.opts.Clients)
	c, err := s.spawn(kind)
	if err != nil {
		return nil, err
	}
	s.child = c
	defer func() { c.kill(); s.child = nil }()
	begin := time.Now()
	if err := c.waitFor(s.opts.SyncTimeout, func(st stormStatus) bool { return st.synced == s.opts.Clients }); err != nil {
		return nil, fmt.Errorf("initial sync: %w (%d of %d synced)\n%s", err, c.status().synced, s.opts.Clients, c.stderrTail())
	}
	m.InitialSyncSeconds = time.Since(begin).Seconds()
	s.logf("%s: %d clients synced in %.1fs", kind, s.opts.Clients, m.InitialSyncSeconds)
	time.Sleep(2 * time.Second) // every client is watching
	c.send("arm")
	if err := c.waitFor(time.Minute, func(st stormStatus) bool { return st.armed }); err != nil {
		return nil, fmt.Errorf("arm: %w\n%s", err, c.stderrTail())
	}
	if err := bumpRevision(ctx, s.kube); err != nil {
		return nil, err
	}
	s.logf("%s: restarting the apiserver", kind)
	if m.KilledAt, m.ReadyAt, err = restartSampled(ctx, s.sampler, s.opts.RestartAPIServer); err != nil {
		return nil, err
	}
	s.logf("%s: apiserver ready after %.1fs; waiting for %d relists", kind, float64(m.ReadyAt-m.KilledAt)/1e9, s.opts.Clients)
	if err := c.waitFor(s.opts.RelistTimeout, func(st stormStatus) bool { return st.allRelisted }); err != nil {
		s.logf("%s: %v: %d of %d clients relisted", kind, err, c.status().relisted, s.opts.Clients)
	}
	m.HighWaterRSS = s.highWater()
	st := c.status()
	m.RelistedClients = st.relisted
	m.DoneAt = st.lastRelist
	if !st.allRelisted {
		m.DoneAt = time.Now().UnixNano()
	}
	s.logf("%s: %d clients relisted %.1fs after the kill", kind, st.relisted, float64(m.DoneAt-m.KilledAt)/1e9)
	time.Sleep(s.opts.Tail)
	c.send("stop")
	res, err := c.result(2 * time.Minute)
	if err != nil {
		return nil, err
	}
	m.Requests, m.Clients = res.Storm, res.Clients
	m.ConsumerMaxRSS = c.maxRSS()
	s.measure(m)
	m.Correct, m.Incorrect = stormVerdict(res, s.opts.Clients, s.opts.Objects, st.allRelisted)
	return m, nil
}

// stormVerdict: every client synced, relisted, and ends with exactly the
// server's objects.
func stormVerdict(res *StormConsumerResult, clients, objects int, allRelisted bool) (bool, string) {
	var why []string
	if res.ServerObjects != objects {
		why = append(why, fmt.Sprintf("the server holds %d objects, not %d", res.ServerObjects, objects))
	}
	if len(res.Clients) != clients {
		why = append(why, fmt.Sprintf("%d clients reported, not %d", len(res.Clients), clients))
	}
	if !allRelisted {
		why = append(why, "not every client relisted")
	}
	for i, c := range res.Clients {
		if c.SyncedAt == 0 || c.RelistedAt == 0 || c.Missing+c.Stale+c.Extra > 0 || c.StoreLen != res.ServerObjects {
			why = append(why, fmt.Sprintf("client %d: synced %v, relisted %v, %d cached, %d missing, %d stale, %d extra",
				i, c.SyncedAt != 0, c.RelistedAt != 0, c.StoreLen, c.Missing, c.Stale, c.Extra))
			if len(why) > 5 {
				break
			}
		}
	}
	return len(why) == 0, strings.Join(why, "; ")
}

// highWater is the apiserver's resident-set high-water mark (bytes), 0 if
// it cannot be read.
func (s *storm) highWater() float64 { return highWater(s.opts.APIServerPID, s.logf) }

// measure fills a mode's apiserver figures from the samples.
func (s *storm) measure(m *StormMode) {
	samples, _ := s.sampler.Samples()
	failures := s.sampler.Failures()
	m.ScrapeErrs = map[string]int{}
	for k, v := range failures {
		if d := v - s.failures[k]; d > 0 {
			m.ScrapeErrs[k] = d
		}
	}
	s.failures = failures
	m.RestartSeconds = float64(m.ReadyAt-m.KilledAt) / 1e9
	m.RelistSeconds = float64(m.DoneAt-m.KilledAt) / 1e9
	killed, ready := time.Unix(0, m.KilledAt), time.Unix(0, m.ReadyAt)
	done := time.Unix(0, m.DoneAt)
	from, to := killed.Add(-2*time.Second), done.Add(s.opts.Tail)
	var last *APIServerSample // the last sample before the kill
	for i, smp := range samples {
		if smp.At.Before(killed) {
			last = &samples[i]
		} else if last != nil && !m.Restarted && smp.Requests < last.Requests {
			m.Restarted = true
		}
		if smp.At.Before(from) || smp.At.After(to) {
			continue
		}
		m.Series = append(m.Series, [3]float64{smp.At.Sub(killed).Seconds(), smp.RSS / (1 << 20), smp.HeapInuse / (1 << 20)})
		if smp.At.Before(killed) {
			continue
		}
		// The restarted apiserver counts from zero: its counters are the storm's.
		m.ServerThrottled = max(m.ServerThrottled, smp.Throttled)
		// A scrape that returned just after the kill was answered by the
		// old apiserver, which still held its clients' initial sync: peaks
		// count from the new one's being ready.
		if !smp.At.Before(ready) && !smp.At.After(done) {
			m.PeakRSS, m.PeakHeap = max(m.PeakRSS, smp.RSS), max(m.PeakHeap, smp.HeapInuse)
			m.PeakLive, m.Allocated = max(m.PeakLive, smp.LiveHeap), max(m.Allocated, smp.Allocated)
			m.PeakWatches = max(m.PeakWatches, smp.Watches)
		}
	}
}

// ---- the consumer process ----

type stormChild struct {
	*consumerProcess
	resultPath string

	mu sync.Mutex
	st stormStatus
}

type stormStatus struct {
	synced, relisted int
	armed            bool
	allRelisted      bool
	lastRelist       int64
}

func (s *storm) spawn(kind string) (*stormChild, error) {
	c := &stormChild{
		resultPath: filepath.Join(s.opts.OutDir, kind+".json"),
	}
	args := []string{"storm-consume", "--kind", kind, "--kubeconfig", s.kubeconfig, "--namespace", s.namespace,
		"--clients", strconv.Itoa(s.opts.Clients), "--objects", strconv.Itoa(s.opts.Objects),
		"--qps", strconv.FormatFloat(float64(s.opts.ClientQPS), 'f', -1, 32), "--burst", strconv.Itoa(s.opts.ClientBurst),
		"--result", c.resultPath}
	var err error
	c.consumerProcess, err = startConsumer(s.opts.Binary, args, kind, codec.WireJSON, filepath.Join(s.opts.OutDir, kind+".log"), c.line)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// line takes one line of the storm consumer's protocol (RunStormConsumer).
func (c *stormChild) line(f []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch f[0] {
	case "synced":
		c.st.synced++
	case "armed":
		c.st.armed = true
	case "relisted":
		c.st.relisted++
		if len(f) == 3 {
			at, _ := strconv.ParseInt(f[2], 10, 64)
			c.st.lastRelist = max(c.st.lastRelist, at)
		}
	case "allrelisted":
		c.st.allRelisted = true
	}
}

func (c *stormChild) status() stormStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st
}

func (c *stormChild) waitFor(timeout time.Duration, ok func(stormStatus) bool) error {
	deadline := time.Now().Add(timeout)
	for {
		st := c.status()
		if ok(st) {
			return nil
		}
		if err := c.exited(); err != nil {
			return fmt.Errorf("consumer exited: %v", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *stormChild) result(timeout time.Duration) (*StormConsumerResult, error) {
	if err := c.wait(timeout); err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	b, err := os.ReadFile(c.resultPath)
	if err != nil {
		return nil, err
	}
	var res StormConsumerResult
	return &res, json.Unmarshal(b, &res)
}

// maxRSS is the exited process's peak resident set (bytes; Linux reports KiB).
func (c *stormChild) maxRSS() int64 {
	if c.cmd.ProcessState == nil {
		return 0
	}
	if ru, ok := c.cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss * 1024
	}
	return 0
}
