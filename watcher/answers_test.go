package watcher

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"rawwatch/api/v1alpha1"
	"rawwatch/observe"
	"rawwatch/store"
)

// answers is a Source that answers with bodies written out in a test: LIST
// pages in order (the last one again once they run out; a probe, a LIST of
// one item, gets the page served last), WATCH streams in order, then
// streams that stay open and silent until their request ends.
type answers struct {
	mu              sync.Mutex
	lists, watches  []string
	listed, watched int
}

func (s *answers) List(_ context.Context, opts metav1.ListOptions) (io.ReadCloser, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.listed
	if opts.Limit != 1 || opts.Continue != "" {
		s.listed++
	} else {
		n--
	}
	return io.NopCloser(strings.NewReader(s.lists[max(0, min(n, len(s.lists)-1))])), nil
}

func (s *answers) Watch(ctx context.Context, _ metav1.ListOptions) (io.ReadCloser, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watched++
	if s.watched <= len(s.watches) {
		return io.NopCloser(strings.NewReader(s.watches[s.watched-1])), nil
	}
	return silentBody{ctx}, nil
}

// silentBody is a stream that sends nothing until its request ends.
type silentBody struct{ ctx context.Context }

func (b silentBody) Read([]byte) (int, error) { <-b.ctx.Done(); return 0, b.ctx.Err() }
func (silentBody) Close() error               { return nil }

// played is what a watcher made of the answers.
type played struct {
	store  *store.Store[*v1alpha1.MyResource]
	deltas []store.Delta[*v1alpha1.MyResource]
	states []StateChanged
	rv     string
}

// play runs a watcher on s in virtual time until the answers run out
// (every goroutine waits: the last stream is silent, or a backoff runs),
// and returns what it did. opts.Codec and Observer are set here; opts.Handler
// is called after the delta is recorded; setup, if given, sets up the store.
func play(t *testing.T, s *answers, opts Options[*v1alpha1.MyResource], setup ...func(*store.Store[*v1alpha1.MyResource])) played {
	t.Helper()
	var p played
	synctest.Test(t, func(t *testing.T) {
		p.store = store.New[*v1alpha1.MyResource]()
		for _, f := range setup {
			f(p.store)
		}
		opts.Codec = codec
		handler := opts.Handler
		opts.Handler = func(d store.Delta[*v1alpha1.MyResource]) {
			p.deltas = append(p.deltas, d)
			if handler != nil {
				handler(d)
			}
		}
		opts.Observer = observe.Func(func(e observe.Event) {
			if e, ok := e.(StateChanged); ok {
				p.states = append(p.states, e)
			}
		})
		w := New(s, p.store, opts)
		ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
		done := make(chan struct{})
		go func() { w.Run(ctx); close(done) }()
		synctest.Wait()
		p.rv = w.ResourceVersion()
		cancel()
		<-done
	})
	return p
}

// deleted is the Deleted deltas of key.
func (p played) deleted(key string) []store.Delta[*v1alpha1.MyResource] {
	var out []store.Delta[*v1alpha1.MyResource]
	for _, d := range p.deltas {
		if d.Type == store.Deleted && d.Key == key {
			out = append(out, d)
		}
	}
	return out
}

// item is a MyResource's JSON, with metadata (after name and namespace)
// and the members after it as given.
func item(name, metadata, rest string) string {
	return `{` + objHead + `,"metadata":{"name":"` + name + `","namespace":"ns"` + metadata + `}` + rest + `}`
}

// page is a LIST page at rv holding items.
func page(rv string, items ...string) string {
	return `{"kind":"MyResourceList","apiVersion":"example.com/v1alpha1","metadata":{"resourceVersion":"` + rv + `"},"items":[` + strings.Join(items, ",") + `]}`
}

// frame is a watch frame of typ carrying object.
func framed(typ, object string) string {
	return `{"type":"` + typ + `","object":` + object + `}` + "\n"
}

// expired is the ERROR frame of a watch whose resourceVersion was compacted.
const expired = `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version","reason":"Expired","code":410}}` + "\n"

// objHead is a MyResource's apiVersion and kind, as a server writes them.
const objHead = `"apiVersion":"example.com/v1alpha1","kind":"MyResource"`
