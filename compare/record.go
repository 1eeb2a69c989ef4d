package compare

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
)

// Event types as recorded.
const (
	EvAdd    = 'A'
	EvUpdate = 'U'
	EvDelete = 'D'
	// EvResync is an update whose resourceVersion did not change (an
	// informer's relist reports every object again this way).
	EvResync = 'S'
)

// evTypes are the event types in the order recorder.byType counts them.
const evTypes = string(EvAdd) + string(EvUpdate) + string(EvDelete) + string(EvResync)

// recorder is the consumer side of the measurement: it streams events to a
// file (so that recording does not grow the heap being measured), samples
// the process's memory, and counts the requests the consumer makes.
type recorder struct {
	mu     sync.Mutex
	events *bufio.Writer
	file   *os.File

	byType [len(evTypes)]atomic.Int64 // events of each type (count)
	counts requestCounts

	samplesMu sync.Mutex
	samples   []MemSample

	// onEvent, if set, also hears every event (ConsumerConfig.OnEvent).
	onEvent func(typ byte, rv, key string, at int64)
}

// MemSample is one reading of a consumer's memory.
type MemSample struct {
	At        int64  `json:"at"` // unix nanoseconds
	HeapInuse uint64 `json:"heapInuse"`
	HeapAlloc uint64 `json:"heapAlloc"`
	RSS       uint64 `json:"rss"`
	// Label marks a reading taken after a forced GC at a phase boundary
	// ("after-sync", ...): the live heap at that point.
	Label string `json:"label,omitempty"`
}

func newRecorder(eventsPath string) (*recorder, error) {
	f, err := os.Create(eventsPath)
	if err != nil {
		return nil, err
	}
	return &recorder{file: f, events: bufio.NewWriterSize(f, 256<<10)}, nil
}

// discardRecorder counts events and writes them nowhere.
func discardRecorder() *recorder { return &recorder{events: bufio.NewWriter(io.Discard)} }

// event records one handler call. The line format is "T RV AT KEY".
func (r *recorder) event(typ byte, rv, key string) {
	at := time.Now().UnixNano()
	if r.onEvent != nil {
		r.onEvent(typ, rv, key, at)
	}
	if i := strings.IndexByte(evTypes, typ); i >= 0 {
		r.byType[i].Add(1)
	}
	r.mu.Lock()
	w := r.events
	w.WriteByte(typ)
	w.WriteByte(' ')
	w.WriteString(rv)
	w.WriteByte(' ')
	var buf [20]byte
	w.Write(strconv.AppendInt(buf[:0], at, 10))
	w.WriteByte(' ')
	w.WriteString(key)
	w.WriteByte('\n')
	r.mu.Unlock()
}

// count is how many events of type typ (one of evTypes) were recorded.
func (r *recorder) count(typ byte) int64 { return r.byType[strings.IndexByte(evTypes, typ)].Load() }

func (r *recorder) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.events.Flush(); err != nil || r.file == nil {
		return err
	}
	return r.file.Close()
}

// sample reads the memory figures; label != "" forces a GC first.
func (r *recorder) sample(label string) MemSample {
	if label != "" {
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := MemSample{At: time.Now().UnixNano(), HeapInuse: ms.HeapInuse, HeapAlloc: ms.HeapAlloc, RSS: rss(), Label: label}
	r.samplesMu.Lock()
	r.samples = append(r.samples, s)
	r.samplesMu.Unlock()
	return s
}

// sampleEvery samples memory until stop is closed.
func (r *recorder) sampleEvery(d time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			r.sample("")
		}
	}
}

// rss is the resident set size from /proc/self/statm (Linux), 0 elsewhere.
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(b))
	if len(fields) < 2 {
		return 0
	}
	pages, _ := strconv.ParseUint(fields[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}

// requestCounts are the API requests a consumer made, by kind.
type requestCounts struct {
	// ListStarts are LIST requests without a continue token (a list, or a
	// relist, begins); ListPages all LIST requests.
	ListStarts, ListPages atomic.Int64
	// WatchLists are WATCH requests with sendInitialEvents (each one a list).
	WatchLists, Watches atomic.Int64
	// Probes are one-item LISTs (limit=1, no continue token): the raw
	// watcher asks where the server is with one; not a list of the objects.
	Probes atomic.Int64
}

// RequestCounts is requestCounts as reported.
type RequestCounts struct {
	ListStarts int64 `json:"listStarts"`
	ListPages  int64 `json:"listPages"`
	WatchLists int64 `json:"watchLists"`
	Watches    int64 `json:"watches"`
	Probes     int64 `json:"probes,omitempty"`
}

func (c *requestCounts) snapshot() RequestCounts {
	return RequestCounts{ListStarts: c.ListStarts.Load(), ListPages: c.ListPages.Load(),
		WatchLists: c.WatchLists.Load(), Watches: c.Watches.Load(), Probes: c.Probes.Load()}
}

// Lists is how many complete (re)lists the requests amount to.
func (c RequestCounts) Lists() int64 { return c.ListStarts + c.WatchLists }

// countRequests wraps cfg's transport to count requests.
func (r *recorder) countRequests(cfg *rest.Config) {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodGet {
				q := req.URL.Query()
				switch {
				case q.Get("watch") == "true" && q.Get("sendInitialEvents") == "true":
					r.counts.WatchLists.Add(1)
					r.counts.Watches.Add(1)
				case q.Get("watch") == "true":
					r.counts.Watches.Add(1)
				case q.Get("continue") == "" && q.Get("limit") == "1":
					r.counts.Probes.Add(1)
				case q.Get("continue") == "":
					r.counts.ListStarts.Add(1)
					r.counts.ListPages.Add(1)
				default:
					r.counts.ListPages.Add(1)
				}
			}
			return rt.RoundTrip(req)
		})
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (r *recorder) statusLine(storeLen int, lists int64, bytes *ByteCounter) string {
	c := r.counts.snapshot()
	return fmt.Sprintf("status %d %d %d %d %d %d %d %d %d %d", r.count(EvAdd), r.count(EvUpdate), r.count(EvDelete), r.count(EvResync),
		storeLen, c.Lists(), c.ListPages, lists, bytes.Read(), bytes.Wire())
}
