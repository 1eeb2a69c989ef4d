package compare_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"rawwatch/compare"
	"rawwatch/internal/testkit"
)

// The sampler reads a real apiserver's own /metrics with the admin token: its
// memory and CPU are non-zero, requests made in between are counted, and
// Run keeps sampling.
func TestAPIServerSamplerReadsARealAPIServer(t *testing.T) {
	cp := testkit.Shared.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := cp.Config()
	s, err := compare.NewAPIServerSampler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	before, err := s.Scrape(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// An open WATCH is counted while the apiserver serves it.
	w, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var watching compare.APIServerSample
	for deadline := time.Now().Add(30 * time.Second); watching.Watches < 1; time.Sleep(100 * time.Millisecond) {
		if watching, err = s.Scrape(ctx); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("an open WATCH is not counted: %+v", watching)
		}
	}

	var wire compare.ByteCounter
	counted := *cfg
	wire.Install(&counted)
	cs := kubernetes.NewForConfigOrDie(&counted)
	for range 5 {
		if _, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	after, err := s.Scrape(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.RSS <= 0 || after.HeapInuse <= 0 || after.LiveHeap <= 0 || after.CPUSeconds <= 0 {
		t.Fatalf("sample %+v: memory and CPU must be positive", after)
	}
	if after.Allocated <= before.Allocated {
		t.Fatalf("allocated %v then %v bytes: the apiserver allocated nothing for 5 LISTs", before.Allocated, after.Allocated)
	}
	if after.Requests < before.Requests+5 {
		t.Fatalf("requests %v then %v: the 5 LISTs in between are not counted", before.Requests, after.Requests)
	}
	// Small responses travel uncompressed, inside TLS records and HTTP
	// headers: more bytes on the wire than in the bodies.
	if wire.Requests() != 5 || wire.Read() == 0 || wire.Wire() <= wire.Read() {
		t.Fatalf("byte counter: %d requests, %d bytes read, %d on the wire; want 5 requests, and more bytes on the wire than read",
			wire.Requests(), wire.Read(), wire.Wire())
	}

	// Run keeps sampling. No rate is asserted: on a loaded machine one
	// scrape can take longer than the interval.
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); s.Run(runCtx, 100*time.Millisecond) }()
	var samples []compare.APIServerSample
	for deadline := time.Now().Add(30 * time.Second); len(samples) < 3; time.Sleep(50 * time.Millisecond) {
		var failed int
		samples, failed = s.Samples()
		if time.Now().After(deadline) {
			t.Fatalf("%d samples (%d failed scrapes) in 30 s", len(samples), failed)
		}
	}
	stop()
	<-done
	if rss, heap := compare.Peak(samples, time.Time{}); rss <= 0 || heap <= 0 {
		t.Fatalf("peak rss %v heap %v", rss, heap)
	}
}
