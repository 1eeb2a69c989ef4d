package store

// DeltaType says how an object changed.
type DeltaType int

const (
	// Added: the key was not in the store before.
	Added DeltaType = iota + 1
	// Updated: the key was in the store with another resourceVersion.
	Updated
	// Deleted: the key left the store.
	Deleted
)

func (t DeltaType) String() string {
	if t < Added || t > Deleted {
		return "Unknown"
	}
	return [...]string{"Added", "Updated", "Deleted"}[t-Added]
}

// Delta is one change to the store, as handed to the watcher's handler.
type Delta[T Object] struct {
	Type DeltaType
	Key  string
	// Object is the new state; for Deleted, the final (or last known) state.
	Object T
	// Old is the state replaced by an Updated delta.
	Old T
	// FinalStateUnknown marks a Deleted not seen as a DELETED event (a relist
	// found it gone): Object is the last state the store knew (client-go's
	// cache.DeletedFinalStateUnknown).
	FinalStateUnknown bool
}
