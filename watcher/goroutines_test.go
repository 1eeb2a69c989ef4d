package watcher_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"regexp"
	"runtime/pprof"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"rawwatch/api/v1alpha1"
	"rawwatch/internal/fakeapi"
	"rawwatch/store"
	"rawwatch/watcher"
)

// loopLabel marks the loop's goroutine (pprof labels): a goroutine it
// starts carries the label too.
const loopLabel = "rawwatch-test-loop"

// labelled counts the goroutines that carry loopLabel.
func labelled(t *testing.T) int {
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		t.Error(err)
	}
	// debug=1 groups equal stacks: "N @ addresses", then "# labels: {...}".
	n := 0
	for _, m := range regexp.MustCompile(`(?m)^(\d+) @ [^\n]*\n# labels: \{[^}]*"`+loopLabel+`"`).FindAllSubmatch(b.Bytes(), -1) {
		c, _ := strconv.Atoi(string(m[1]))
		n += c
	}
	return n
}

// counting is a Source that, at every request, counts the goroutines of
// the loop; its first WATCHes fail without opening (the loop probes).
type counting struct {
	inner watcher.Source
	t     *testing.T

	mu          sync.Mutex
	failWatches int
	seen        map[string][]int // by request kind: the loop's goroutines at each
}

func (c *counting) count(kind string) {
	n := labelled(c.t)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[kind] = append(c.seen[kind], n)
}

func (c *counting) List(ctx context.Context, opts metav1.ListOptions) (io.ReadCloser, error) {
	kind := "LIST"
	if opts.Limit == 1 {
		kind = "PROBE"
	}
	c.count(kind)
	return c.inner.List(ctx, opts)
}

func (c *counting) Watch(ctx context.Context, opts metav1.ListOptions) (io.ReadCloser, error) {
	c.count("WATCH")
	c.mu.Lock()
	fail := c.failWatches > 0
	c.failWatches--
	c.mu.Unlock()
	if fail {
		return nil, errors.New("connection refused")
	}
	return c.inner.Watch(ctx, opts)
}

// An unsharded watcher makes its LISTs, WATCHes and probes on the loop's
// goroutine alone: no request starts a goroutine beside it (a reshard's
// cut, package sharding, is armed without one).
func TestRequestsStartNoGoroutine(t *testing.T) {
	srv := fakeapi.New()
	for _, name := range []string{"a", "b", "c"} {
		srv.Put("ns", name, "v0")
	}
	src := &counting{inner: srv, t: t, failWatches: 2, seen: map[string][]int{}}
	w := watcher.New(src, store.New[object](), watcher.Options[object]{
		Codec:   watcher.JSONCodec[object]{GVK: v1alpha1.GroupVersionKind},
		Backoff: watcher.Backoff{Initial: time.Millisecond, Max: 2 * time.Millisecond, Factor: 2, ResetAfter: time.Hour},
	})
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
	done := make(chan struct{})
	go pprof.Do(ctx, pprof.Labels(loopLabel, "yes"), func(ctx context.Context) { w.Run(ctx); close(done) })
	<-w.Synced()
	srv.Put("ns", "d", "v0")
	deadline := time.Now().Add(time.Minute)
	for {
		src.mu.Lock()
		enough := len(src.seen["LIST"]) > 0 && len(src.seen["PROBE"]) > 0 && len(src.seen["WATCH"]) > 2
		src.mu.Unlock()
		if enough || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	src.mu.Lock()
	defer src.mu.Unlock()
	t.Logf("the loop's goroutines at each request: %v", src.seen)
	for _, kind := range []string{"LIST", "PROBE", "WATCH"} {
		if len(src.seen[kind]) == 0 {
			t.Errorf("no %s made: the test did not test what it claims", kind)
		}
		for _, n := range src.seen[kind] {
			if n != 1 {
				t.Errorf("%d goroutines of the loop at a %s, want 1 (the loop's own)", n, kind)
				break
			}
		}
	}
}
