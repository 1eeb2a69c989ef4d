package reconcile

import (
	"context"
	"testing"

	"k8s.io/klog/v2"

	"rawwatch/queue"
	"rawwatch/store"
)

type nopReconciler struct{}

func (nopReconciler) Deleted(context.Context, store.Delta[object]) error { return nil }
func (nopReconciler) Reconcile(context.Context, string) error            { return nil }

// BenchmarkProcessNext is a worker's cost per key, the queue's included: one
// Add, then processNext takes the key and reconciles it with a no-op.
func BenchmarkProcessNext(b *testing.B) {
	c := &Controller[object]{Queue: queue.New(nil), Reconciler: nopReconciler{}}
	c.abort = context.Background()
	work, stop := c.workContext(context.Background())
	defer stop()
	logger := klog.Background()
	b.ReportAllocs()
	for b.Loop() {
		c.Queue.Add("ns/key")
		if !c.processNext(work, logger, 0) {
			b.Fatal("queue shut down")
		}
	}
}
