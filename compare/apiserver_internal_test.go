package compare

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

const metricsText = `# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 1.2345e+08
# TYPE go_memstats_heap_inuse_bytes gauge
go_memstats_heap_inuse_bytes 6.5e+07
# TYPE go_gc_heap_live_bytes gauge
go_gc_heap_live_bytes 4.5e+07
# TYPE go_gc_heap_allocs_bytes_total counter
go_gc_heap_allocs_bytes_total 9.9e+09
# TYPE go_gc_heap_allocs_by_size_bytes histogram
go_gc_heap_allocs_by_size_bytes_sum 1
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",resource="myresources",verb="LIST"} 40
apiserver_request_total{code="429",resource="myresources",verb="LIST"} 7
apiserver_request_total{code="201",resource="myresources",verb="POST"} 3
# TYPE apiserver_longrunning_requests gauge
apiserver_longrunning_requests{component="apiserver",resource="myresources",scope="namespace",verb="WATCH"} 12
apiserver_longrunning_requests{component="apiserver",resource="pods",scope="cluster",verb="WATCH"} 3
apiserver_longrunning_requests{component="apiserver",resource="pods",scope="namespace",subresource="exec",verb="CONNECT"} 2
# TYPE apiserver_request_total_other counter
apiserver_request_total_other{code="429"} 1000
# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{le="+Inf"} 9
`

func TestParseAPIServerMetrics(t *testing.T) {
	s, err := parseAPIServerMetrics(strings.NewReader(metricsText))
	if err != nil {
		t.Fatal(err)
	}
	if s.RSS != 1.2345e8 || s.HeapInuse != 6.5e7 || s.LiveHeap != 4.5e7 || s.Allocated != 9.9e9 || s.CPUSeconds != 12.5 || s.Requests != 50 || s.Throttled != 7 || s.Watches != 15 {
		t.Fatalf("parsed %+v", s)
	}
	if _, err := parseAPIServerMetrics(strings.NewReader("process_resident_memory_bytes{ 1\n")); err == nil {
		t.Fatal("malformed text parsed without error")
	}
}

func TestByteCounter(t *testing.T) {
	body := strings.Repeat("x", 10_000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }))
	defer srv.Close()
	var c ByteCounter
	client := &http.Client{Transport: c.Wrap(http.DefaultTransport)}
	for range 3 {
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if c.Read() != 30_000 || c.Requests() != 3 {
		t.Fatalf("read %d bytes in %d requests, want 30000 in 3", c.Read(), c.Requests())
	}
}

func TestRequestName(t *testing.T) {
	for url, want := range map[string]string{
		"GET /apis/example.com/v1alpha1/namespaces/ns/myresources?limit=500":         "LIST myresources",
		"GET /apis/example.com/v1alpha1/namespaces/ns/myresources?watch=true":        "WATCH myresources",
		"PUT /apis/example.com/v1alpha1/namespaces/ns/myresources/obj-000001/status": "PUT myresources/status",
		"POST /api/v1/namespaces/ns/events":                                          "POST events",
		"PATCH /api/v1/namespaces/ns/events/obj.1234":                                "PATCH events",
		"POST /apis/authentication.k8s.io/v1/selfsubjectreviews":                     "POST selfsubjectreviews",
		"GET /apis/example.com/v1alpha1/namespaces/ns/myresources/obj-000001":        "GET myresources",
	} {
		method, path, _ := strings.Cut(url, " ")
		req, err := http.NewRequest(method, "https://server"+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := requestName(req); got != want {
			t.Errorf("%s: %q, want %q", url, got, want)
		}
	}
}

// The longest gap between samples in a window counts the window's start and
// end when no sample lies beyond them, and the interval across the end when
// one does; samples before the window do not count.
func TestLongestGap(t *testing.T) {
	for _, c := range []struct {
		times    []float64
		from, to float64
		want     float64
	}{
		{[]float64{-5, 0.1, 0.2, 0.3}, 0, 1, 0.7},     // the last sample → the end
		{[]float64{0.1, 0.2, 1.5}, 0, 1, 1.3},         // across the end
		{[]float64{-1, 2.5, 2.6, 3}, 2, 4, 1},         // from the start, before the first sample: 0.5; the last one → the end: 1
		{nil, 0, 2, 2},                                // no sample at all
		{[]float64{0.5, 0.6, 0.7, 0.8, 9}, 0, 1, 8.2}, // the next sample comes late
	} {
		if got := longestGap(c.times, c.from, c.to); got < c.want-1e-9 || got > c.want+1e-9 {
			t.Errorf("longestGap(%v, %v, %v) = %v, want %v", c.times, c.from, c.to, got, c.want)
		}
	}
}

// A window's figures from made-up samples: idle for a second (peaks 100 MiB
// RSS, 60 MiB heap, 40 MiB live; 0.1 CPU s/s, 10 MiB/s allocated), then a
// second in which the apiserver works 0.5 CPU s/s and allocates 40 MiB/s
// more, and grows by 3, 3 and 2 MiB every sample.
func TestCostWindow(t *testing.T) {
	s, at := sampled(22, 0.1, func(i int, x float64) APIServerSample {
		if x < 1 {
			return APIServerSample{RSS: 100 << 20, HeapInuse: float64(50+10*(i%2)) * (1 << 20), LiveHeap: 40 << 20,
				CPUSeconds: 0.1 * x, Allocated: 10 * x * (1 << 20)}
		}
		return APIServerSample{RSS: float64(100+3*(i-10)) * (1 << 20), HeapInuse: float64(60+3*(i-10)) * (1 << 20), CPUSeconds: 0.1 + 0.6*(x-1),
			LiveHeap: float64(40+2*(i-10)) * (1 << 20), Allocated: (10 + 50*(x-1)) * (1 << 20)}
	})
	w := window(s, at(0), at(0.95), at(0.95), at(0.95), at(2.05), true, 12345, 678)
	if !w.Done || w.BytesRead != 12345 || w.WireBytes != 678 || !near(w.Seconds, 1.1) {
		t.Errorf("window: %+v", w)
	}
	if !near(w.IdleRSS, 100<<20) || !near(w.IdleHeap, 60<<20) || !near(w.IdleCPURate, 0.1) {
		t.Errorf("idle: RSS %v, heap %v, CPU %v/s", w.IdleRSS, w.IdleHeap, w.IdleCPURate)
	}
	// Peaks: the first sample after the window, at 2.1 s (133, 93, 62 MiB:
	// a window may be shorter than the sampling interval). CPU and allocations
	// from the last sample before the window (0.9 s) to the first after it
	// (2.1 s): 0.67 s of CPU, of which 0.12 s idle; 56 MiB, of which 12 idle.
	if !near(w.RSSAboveIdle(), 33<<20) || !near(w.HeapAboveIdle(), 33<<20) || !near(w.LiveAboveIdle(), 22<<20) ||
		!near(w.CPUSeconds, 0.67) || !near(w.CPUAboveIdle, 0.55) || !near(w.Allocated, 56<<20) || !near(w.AllocatedAboveIdle, 44<<20) {
		t.Errorf("above idle: RSS %v MiB, heap %v MiB, live %v MiB, CPU %v s (%v above idle), allocated %v MiB (%v above idle)",
			w.RSSAboveIdle()/(1<<20), w.HeapAboveIdle()/(1<<20), w.LiveAboveIdle()/(1<<20), w.CPUSeconds, w.CPUAboveIdle,
			w.Allocated/(1<<20), w.AllocatedAboveIdle/(1<<20))
	}
	if !near(w.SampleGap, 0.1) || len(w.Series) != 22 {
		t.Errorf("gap %v, %d points", w.SampleGap, len(w.Series))
	}
}

// A window with a restart in it (a relist) counts CPU and allocations from
// the first sample after the apiserver was ready again: its counters start
// from zero then. Its peaks leave out the samples between the kill and the
// new apiserver's being ready: the old one answered those, with the memory
// of everything before the window.
func TestCostWindowAfterARestart(t *testing.T) {
	s, at := sampled(22, 0.1, func(i int, x float64) APIServerSample {
		if x >= 1.3 { // restarted: counting from zero
			return APIServerSample{CPUSeconds: 0.5 * (x - 1.2), Allocated: (x - 1.2) * (100 << 20), RSS: float64(200+i) * (1 << 20)}
		}
		return APIServerSample{CPUSeconds: 5 + x, Allocated: 500 << 20, RSS: 900 << 20}
	})
	w := window(s, at(0), at(0.5), at(0.95), at(1.25), at(2.05), true, 0, 0)
	// From the 1.3 s sample to the 2.1 s one.
	if !near(w.CPUSeconds, 0.4) || !near(w.Allocated, 80<<20) {
		t.Errorf("CPU %v s, allocated %v MiB; want 0.4 s and 80 MiB", w.CPUSeconds, w.Allocated/(1<<20))
	}
	// The last sample in the window, 2.0 s, or the first after it, 2.1 s.
	if !near(w.PeakRSS, 221<<20) {
		t.Errorf("peak RSS %v MiB; want 221 (the old apiserver's 900 before ready do not count)", w.PeakRSS/(1<<20))
	}
}

// On a busy machine the 100 ms scrapes come late: here one every 0.75 s. The
// series still shows the apiserver before the window (its last three
// samples, though the idle time is 0.3 s) and after it (the first two, though
// they come later than a second after). It once held one sample before a
// relist's window, and the harness's test failed on a loaded machine.
func TestCostWindowSeriesOfLateSamples(t *testing.T) {
	s, at := sampled(12, 0.75, func(i int, _ float64) APIServerSample {
		return APIServerSample{RSS: 100 << 20, CPUSeconds: float64(i)}
	})
	// idle [2.7, 3.0), window [3.0, 3.2]; samples at 0, 0.75, 1.5, 2.25 | 3 | 3.75, 4.5, 5.25 ...
	w := window(s, at(2.7), at(3), at(3), at(3), at(3.2), true, 0, 0)
	var got []float64
	for _, p := range w.Series {
		got = append(got, p[0])
	}
	if want := []float64{-2.25, -1.5, -0.75, 0, 0.75, 1.5}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("series at %v, want %v", got, want)
	}
	// A window before the first sample and past the last.
	if w := window(s, at(-1), at(-1), at(-1), at(-1), at(9), true, 0, 0); len(w.Series) != 12 {
		t.Errorf("%d points, want all 12", len(w.Series))
	}
}

// sampled is a sampler that holds n made-up samples, one every `every`
// seconds from now (at(0)): sample i, taken at x = i*every seconds, is
// sample(i, x) with At set.
func sampled(n int, every float64, sample func(i int, x float64) APIServerSample) (s *APIServerSampler, at func(x float64) time.Time) {
	t0 := time.Now()
	at = func(x float64) time.Time { return t0.Add(time.Duration(x * float64(time.Second))) }
	s = &APIServerSampler{}
	for i := range n {
		x := float64(i) * every
		smp := sample(i, x)
		smp.At = at(x)
		s.samples = append(s.samples, smp)
	}
	return s, at
}

// near is a == b but for float rounding.
func near(a, b float64) bool { return a > b-1e-6 && a < b+1e-6 }
