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
	switch t {
	case Added:
		return "Added"
	case Updated:
		return "Updated"
	case Deleted:
		return "Deleted"
	}
	return "Unknown"
}

// Delta is one change to the store, as handed to the watcher's handler.
type Delta[T Object] struct {
	Type DeltaType
	Key  string
	// Object is the new state; for Deleted, the final (or last known) state.
	Object T
	// Old is the state replaced by an Updated delta.
	Old T
	// FinalStateUnknown marks a Deleted delta found by a relist rather than
	// seen as a DELETED event: the object vanished while the watch was down,
	// and Object is the last state this store knew, not the server's final one.
	// (client-go wraps such objects in cache.DeletedFinalStateUnknown.)
	FinalStateUnknown bool
}
