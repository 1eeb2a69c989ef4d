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

	"rawwatch/compare"
	"rawwatch/internal/app"
	"rawwatch/internal/testkit"
)

// BenchmarkShardedReplicas measures what one replica of a sharded
// controller costs at 1, 2 and 4 replicas: the live heap each adds to the
// process (the replicas run in one process; the heap after a GC, less the
// heap before they started, shared out equally) and the bytes each read from
// the server until its store held its share. 30,000 objects by default
// (RAWWATCH_SHARD_OBJECTS); they are created and reconciled once, first.
//
//	go test -run '^$' -bench ShardedReplicas -benchtime 1x ./internal/app
func BenchmarkShardedReplicas(b *testing.B) {
	objects := 30000
	if n, err := strconv.Atoi(os.Getenv("RAWWATCH_SHARD_OBJECTS")); err == nil {
		objects = n
	}
	cp := shared.Get(b)
	cfg := cp.Config()
	ns := testkit.Namespace(b, cfg)
	c := testkit.Client(b, cfg)
	start := time.Now()
	if err := testkit.CreateMany(context.Background(), c, ns, "obj", objects); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d objects created in %s", objects, time.Since(start).Round(time.Second))
	for _, n := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			for b.Loop() {
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
				settledIn := calm.Sub(began)
				runtime.GC()
				var after runtime.MemStats
				runtime.ReadMemStats(&after)
				perReplica := (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(n)
				var read int64
				for i, r := range rs {
					read += bytes[i].Read()
					b.Logf("%d replicas: %s holds %d objects, read %.1f MiB", n, r.name, r.a.Store.Len(), float64(bytes[i].Read())/(1<<20))
				}
				b.ReportMetric(perReplica/(1<<20), "MiB-heap/replica")
				b.ReportMetric(float64(read)/float64(n)/(1<<20), "MiB-read/replica")
				b.ReportMetric(settledIn.Seconds(), "s-to-settle")
				cancel()
				for range n {
					<-done
				}
			}
		})
	}
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
