// Package observe carries what happens inside the controller to whoever
// listens: the metrics, the --explain narration, a test's recorder. It is
// the one observer style of the project:
//
//	watcher   ─┐  watcher.ListPage, watcher.Received, watcher.BackoffStarted, ...
//	queue     ─┤  queue.Added, queue.Got
//	workers   ─┤  reconcile.Started, reconcile.Finished, reconcile.Resynced
//	leader    ─┤  leader.Leading, leader.NewLeader
//	ring, ... ─┤  ring.MembersChanged, freshness.Measured, ...
//	           └─▶ Observer.Observe(Event) ──▶ Fanout ──▶ metrics, explain, tests
//
// Each part reports typed values, one struct per kind of happening (as
// kube-rs's watcher yields one Event enum), and defines them beside the code
// that reports them; a listener switches on the type and ignores what it
// does not know. Events are delivered synchronously, in order, on the
// goroutine that caused them: an Observer must be quick and must not block
// (hand slow work to a goroutine of its own, dropping when it falls behind).
package observe

// Event is one happening: a value of one of the event types of the package
// that reported it (watcher.ListPage, queue.Added, ...).
type Event = any

// Observer receives events.
type Observer interface {
	Observe(Event)
}

// Func adapts a function to an Observer.
type Func func(Event)

// Observe calls f.
func (f Func) Observe(e Event) { f(e) }

// Fanout hands every event to each of its observers, in order; nil ones are
// skipped, so a Fanout can be built from optional parts.
type Fanout []Observer

// Observe hands e to each observer.
func (f Fanout) Observe(e Event) {
	for _, o := range f {
		if o != nil {
			o.Observe(e)
		}
	}
}

// Nop discards every event.
var Nop Observer = Func(func(Event) {})
