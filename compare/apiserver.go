package compare

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"
)

// APIServerSample is one reading of the apiserver's own /metrics.
type APIServerSample struct {
	At time.Time `json:"at"`
	// RSS is process_resident_memory_bytes, HeapInuse go_memstats_heap_inuse_bytes.
	RSS       float64 `json:"rss"`
	HeapInuse float64 `json:"heapInuse"`
	// LiveHeap is go_gc_heap_live_bytes: the heap the last GC found live.
	// Heap in use also holds the garbage made since that GC, so it swings
	// by up to GOGC (100%) of the live heap with the GC's timing; the live
	// heap moves only with what the apiserver holds on to.
	LiveHeap float64 `json:"liveHeap"`
	// Allocated is go_gc_heap_allocs_bytes_total, every byte the apiserver
	// has allocated since it started: the work behind the garbage, which
	// does not depend on when the GC runs.
	Allocated float64 `json:"allocated"`
	// CPUSeconds is process_cpu_seconds_total: it restarts from zero when the
	// apiserver does.
	CPUSeconds float64 `json:"cpuSeconds"`
	// Requests is the sum of apiserver_request_total; Throttled the part of it
	// answered 429 (max-in-flight or APF pushing back).
	Requests  float64 `json:"requests"`
	Throttled float64 `json:"throttled"`
	// Watches is the number of WATCH requests being served (the sum of
	// apiserver_longrunning_requests with verb WATCH): in a storm, how many
	// clients stream at once.
	Watches float64 `json:"watches"`
}

// parseAPIServerMetrics reads the few series the storm report needs out of
// the Prometheus text format. Missing series stay zero.
//
// An apiserver's /metrics runs to megabytes (mostly histograms), too much to
// parse ten times a second on a busy machine, so lines of other series are
// dropped before the parser sees them.
func parseAPIServerMetrics(r io.Reader) (APIServerSample, error) {
	var kept bytes.Buffer
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if line := sc.Bytes(); wanted(line) {
			kept.Write(line)
			kept.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return APIServerSample{}, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(&kept)
	if err != nil {
		return APIServerSample{}, err
	}
	var s APIServerSample
	gauge := func(name string) float64 {
		f := fams[name]
		if f == nil || len(f.Metric) == 0 {
			return 0
		}
		return value(f.Metric[0])
	}
	s.RSS = gauge("process_resident_memory_bytes")
	s.HeapInuse = gauge("go_memstats_heap_inuse_bytes")
	s.LiveHeap = gauge("go_gc_heap_live_bytes")
	s.Allocated = gauge("go_gc_heap_allocs_bytes_total")
	s.CPUSeconds = gauge("process_cpu_seconds_total")
	if f := fams["apiserver_request_total"]; f != nil {
		for _, m := range f.Metric {
			v := value(m)
			s.Requests += v
			for _, l := range m.Label {
				if l.GetName() == "code" && l.GetValue() == "429" {
					s.Throttled += v
				}
			}
		}
	}
	if f := fams["apiserver_longrunning_requests"]; f != nil {
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetName() == "verb" && l.GetValue() == "WATCH" {
					s.Watches += value(m)
				}
			}
		}
	}
	return s, nil
}

var sampledSeries = [][]byte{
	[]byte("process_resident_memory_bytes"),
	[]byte("go_memstats_heap_inuse_bytes"),
	[]byte("go_gc_heap_live_bytes"),
	[]byte("go_gc_heap_allocs_bytes_total"),
	[]byte("process_cpu_seconds_total"),
	[]byte("apiserver_request_total"),
	[]byte("apiserver_longrunning_requests"),
}

// wanted reports whether a line of the text format (a sample, or a # HELP or
// # TYPE comment) belongs to one of sampledSeries.
func wanted(line []byte) bool {
	if rest, ok := bytes.CutPrefix(line, []byte("# HELP ")); ok {
		line = rest
	} else if rest, ok := bytes.CutPrefix(line, []byte("# TYPE ")); ok {
		line = rest
	}
	name := line
	if i := bytes.IndexAny(line, "{ "); i >= 0 {
		name = line[:i]
	}
	for _, s := range sampledSeries {
		if bytes.Equal(name, s) {
			return true
		}
	}
	return false
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

// APIServerSampler scrapes an apiserver's /metrics at a fixed interval (the
// issue asks for 100 ms) until stopped. A scrape that fails — the apiserver
// is restarting — is skipped, not fatal: the gap is part of the picture.
type APIServerSampler struct {
	client *http.Client
	url    string

	mu      sync.Mutex
	samples []APIServerSample
	errs    int
	reasons map[string]int // failed scrapes by error (what kind of failure)
}

// NewAPIServerSampler needs a config allowed to GET /metrics (the control
// plane's admin token is).
func NewAPIServerSampler(cfg *rest.Config) (*APIServerSampler, error) {
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	c.Timeout = 2 * time.Second
	return &APIServerSampler{client: c, url: strings.TrimSuffix(cfg.Host, "/") + "/metrics"}, nil
}

// Scrape takes one sample.
func (s *APIServerSampler) Scrape(ctx context.Context) (APIServerSample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return APIServerSample{}, err
	}
	// Not gzipped: compressing megabytes ten times a second would be most
	// of what the scrapes cost the apiserver being measured.
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := s.client.Do(req)
	if err != nil {
		return APIServerSample{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return APIServerSample{}, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	smp, err := parseAPIServerMetrics(resp.Body)
	smp.At = time.Now()
	return smp, err
}

// Run samples every interval until ctx is done.
func (s *APIServerSampler) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		smp, err := s.Scrape(ctx)
		if ctx.Err() != nil {
			return // a scrape cut short by the end is no failure
		}
		s.mu.Lock()
		if err != nil {
			s.errs++
			if s.reasons == nil {
				s.reasons = map[string]int{}
			}
			s.reasons[scrapeFailure(err)]++
		} else {
			s.samples = append(s.samples, smp)
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Samples returns the samples taken so far and how many scrapes failed.
func (s *APIServerSampler) Samples() ([]APIServerSample, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]APIServerSample(nil), s.samples...), s.errs
}

// Failures counts the failed scrapes so far by kind of failure.
func (s *APIServerSampler) Failures() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.reasons {
		out[k] = v
	}
	return out
}

// scrapeFailure names a failed scrape's kind, without its addresses.
func scrapeFailure(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "Client.Timeout") || strings.Contains(msg, "deadline exceeded"):
		return "timeout"
	case strings.Contains(msg, "connection refused"):
		return "connection refused"
	case strings.Contains(msg, "GET /metrics: "):
		return strings.TrimPrefix(msg, "GET /metrics: ")
	case strings.Contains(msg, "EOF") || strings.Contains(msg, "reset"):
		return "connection lost"
	}
	return "other"
}

// Peak is the highest RSS and heap-in-use among samples taken at or after since.
func Peak(samples []APIServerSample, since time.Time) (rss, heap float64) {
	for _, s := range samples {
		if s.At.Before(since) {
			continue
		}
		rss = max(rss, s.RSS)
		heap = max(heap, s.HeapInuse)
	}
	return rss, heap
}

// restartSampled restarts the apiserver with restart once the sampler has a
// recent sample of it as it was (it waits at most 10 s for one), and
// returns when it is ready again.
func restartSampled(ctx context.Context, s *APIServerSampler, restart func(context.Context) error) (killed, ready int64, err error) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if smp, _ := s.Samples(); len(smp) > 0 && time.Since(smp[len(smp)-1].At) < time.Second {
			break
		}
	}
	killed = time.Now().UnixNano()
	err = restart(ctx)
	return killed, time.Now().UnixNano(), err
}

// longestGap is the longest interval between successive times (seconds) in
// the window [from, to], the window's start and end counting as times when
// no sample lies beyond them.
func longestGap(times []float64, from, to float64) float64 {
	prev, gap := from, 0.0
	for _, t := range times {
		if t < from {
			continue
		}
		gap = max(gap, t-prev)
		if t > to {
			return gap
		}
		prev = t
	}
	return max(gap, to-prev)
}
