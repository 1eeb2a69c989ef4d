package compare

import (
	"context"

	"k8s.io/client-go/rest"
)

// For the fault scorecard (package scorecard), which runs every consumer
// kind this package knows, alone, through a fault proxy, in a process of its
// own: the consumer of newConsumer, unchanged, behind an exported face.

// Recording is a consumer of one kind that records every event its handler
// hears to a file, one line each: "T RV AT KEY" (T: A, U, D or S; AT: unix
// nanoseconds).
type Recording struct {
	c   consumer
	rec *recorder
}

// NewRecording builds the consumer of the given kind (one of AllKinds) on
// cfg for namespace ns, recording events to eventsPath.
func NewRecording(kind string, cfg *rest.Config, ns, eventsPath string) (*Recording, error) {
	rec, err := newRecorder(eventsPath)
	if err != nil {
		return nil, err
	}
	c, err := newConsumer(kind, cfg, ns, rec, 0, nil)
	if err != nil {
		rec.close()
		return nil, err
	}
	return &Recording{c: c, rec: rec}, nil
}

// Run consumes until ctx ends; synced is closed after the initial sync.
func (r *Recording) Run(ctx context.Context, synced chan<- struct{}) { r.c.run(ctx, synced) }

// Store is the consumer's cache as key → resourceVersion (nil without a cache).
func (r *Recording) Store() map[string]string { return r.c.dump() }

// Close writes out the events recorded; call it once Run has returned.
func (r *Recording) Close() error { return r.rec.close() }
