package watcher

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/store"
)

// The events the watcher reports to its Options.Observer (package observe),
// on the loop's goroutine, in order; package stats counts them.
type (
	// StateChanged: the machine moved (From may equal To: a re-WATCH), and
	// why; TimeTravel: Action.TimeTravel.
	StateChanged struct {
		From, To   State
		Reason     string
		TimeTravel bool
	}
	// ListPage: a LIST page of Items objects arrived; Continue is the next
	// page's token ("" on the last, whose RV is the list's).
	ListPage struct {
		Page, Items  int
		Continue, RV string
	}
	// Replaced: a list was swapped into the store, which holds Size objects;
	// Added, Updated and Deleted count its deltas.
	Replaced struct {
		RV                            string
		Size, Added, Updated, Deleted int
	}
	// WatchStarted: a WATCH from RV (InitialEvents: a WatchList) is asked
	// for, to end after Timeout.
	WatchStarted struct {
		RV            string
		Timeout       time.Duration
		InitialEvents bool
	}
	// Probed: a probe found the server at RV (or failed: Err); Ours is the store's.
	Probed struct {
		RV, Ours string
		Err      error
	}
	// Received: an object event was applied to the store. Arrived is when
	// it was decoded, Written WrittenAt of its object (zero if unknown).
	// Object is the store's: read it, never change it.
	Received struct {
		Type, Key, RV    string
		Arrived, Written time.Time
		Object           metav1.Object
	}
	// BookmarkReceived: a BOOKMARK moved the resourceVersion to RV.
	BookmarkReceived struct {
		RV               string
		InitialEventsEnd bool
	}
	// WatchEnded: a stream closed after Frames frames, open for Open; Err
	// is why (nil: the server ended it); Quiet is Action.Quiet.
	WatchEnded struct {
		Frames int
		Open   time.Duration
		Err    error
		Quiet  time.Duration
	}
	// BackoffStarted: the loop waits Delay, after an error of Class.
	BackoffStarted struct {
		Delay time.Duration
		Class ErrorClass
	}
	// Skipped: an event or list item could not be decoded.
	Skipped struct{ Err *SkipError }
	// Handed: a change went to the Handler (after the store was updated).
	Handed struct {
		Type              store.DeltaType
		Key               string
		FinalStateUnknown bool
	}
)

// WrittenAt is when obj was last written, as it records it: the latest time
// in its managedFields (the store drops them: ask before), else its
// creation time, in whole seconds; false when it carries neither.
func WrittenAt(obj metav1.Object) (time.Time, bool) {
	var t time.Time
	for _, f := range obj.GetManagedFields() {
		if f.Time != nil && f.Time.After(t) {
			t = f.Time.Time
		}
	}
	if t.IsZero() {
		t = obj.GetCreationTimestamp().Time
	}
	return t, !t.IsZero()
}
