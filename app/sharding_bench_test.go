package app_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"rawwatch/app"
	"rawwatch/compare"
	"rawwatch/internal/testkit"
)

// BenchmarkShardedReplicas measures what one replica of a sharded
// controller costs at 1, 2 and 4 replicas: the live heap each adds to the
// process (the replicas run in one process; the heap after a GC, less the
// heap before they started, shared out equally), the bytes each read from
// the server (LIST, WATCH and its ring's Leases) until the replicas settled
// with every object and were idle, and how long that took (s-to-settle).
// 30,000 objects by default (RAWWATCH_SHARD_OBJECTS), created and reconciled
// once first, so that the measured runs have no status to write.
//
//	go test -run '^$' -bench ShardedReplicas -benchtime 1x ./app
func BenchmarkShardedReplicas(b *testing.B) {
	objects := 30000
	if n, err := strconv.Atoi(os.Getenv("RAWWATCH_SHARD_OBJECTS")); err == nil {
		objects = n
	}
	cp := testkit.Shared.Get(b)
	cfg := cp.Config()
	ns := testkit.Namespace(b, cfg)
	c := testkit.Client(b, cfg)
	start := time.Now()
	testkit.Objects(b, c, ns, "obj", objects)
	b.Logf("%d objects created in %s", objects, time.Since(start).Round(time.Second))
	// Once, unmeasured: a replica writes every status, so that the measured
	// runs find nothing to write and read only what the watch costs.
	measure(b, cfg, ns, objects, 1)
	b.Logf("every object reconciled %s after the start", time.Since(start).Round(time.Second))
	for _, n := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			for b.Loop() {
				heap, read, settledIn := measure(b, cfg, ns, objects, n)
				b.ReportMetric(heap/(1<<20), "MiB-heap/replica")
				b.ReportMetric(read/(1<<20), "MiB-read/replica")
				b.ReportMetric(settledIn.Seconds(), "s-to-settle")
			}
		})
	}
}

// measure runs n sharded replicas until they settled with every object and
// are idle, and returns the live heap and the bytes read per replica, and how
// long that took.
func measure(b *testing.B, cfg *rest.Config, ns string, objects, n int) (heap, read float64, settledIn time.Duration) {
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background().V(1)))
	var rs []*replica
	var bytes []*compare.ByteCounter
	done := make(chan struct{}, n)
	for i := range n {
		counter := &compare.ByteCounter{}
		rcfg := rest.CopyConfig(cfg)
		rcfg.Wrap(counter.Wrap)
		a, err := app.New(app.Options{Config: rcfg, Namespace: ns, Workers: 4,
			Sharding: &app.Sharding{Namespace: ns, Identity: fmt.Sprintf("r%d", i), LeaseDuration: shardLease, RenewPeriod: shardRenew}})
		if err != nil {
			b.Fatal(err)
		}
		rs = append(rs, &replica{name: fmt.Sprintf("r%d", i), a: a})
		bytes = append(bytes, counter)
		go func() { a.Run(ctx); done <- struct{}{} }()
	}
	began := time.Now()
	var calm time.Time // since when the replicas have been settled and idle
	testkit.Eventually(b, 15*time.Minute, func() bool {
		total := 0
		for _, r := range rs {
			total += r.a.Store.Len()
		}
		if !settled(rs...) || total != objects || !quiet(rs) {
			calm = time.Time{}
			return false
		}
		if calm.IsZero() {
			calm = time.Now()
		}
		return time.Since(calm) > 3*time.Second
	}, "the replicas did not settle with the objects")
	settledIn = calm.Sub(began)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	var total int64
	for i, r := range rs {
		total += bytes[i].Read()
		b.Logf("%d replicas: %s holds %d objects, read %.1f MiB", n, r.name, r.a.Store.Len(), float64(bytes[i].Read())/(1<<20))
	}
	cancel()
	for range n {
		<-done
	}
	return (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(n), float64(total) / float64(n), settledIn
}

// quiet: no key waits in any replica's queue, ready or delayed, and none
// is being reconciled.
func quiet(rs []*replica) bool {
	for _, r := range rs {
		if r.a.Queue.Len() > 0 || r.a.Queue.Pending() > 0 || len(r.a.Queue.Snapshot(1).Processing) > 0 {
			return false
		}
	}
	return true
}
