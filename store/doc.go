// Package store is the controller's memory: what it knows about the cluster.
//
// Store is a thread-safe map of objects keyed "namespace/name". The watcher is
// its only writer; reconcilers read it. Every write returns a Delta saying what
// changed, so the caller can react (enqueue the key, package queue) without a
// second queue of objects, as client-go's Indexer and DeltaFIFO do between
// them. A relist is built beside the live map (Replacement) and swapped in
// under one lock; keys that vanished come back as Deleted deltas carrying the
// last object we knew, the equivalent of client-go's DeletedFinalStateUnknown,
// and so does the old object of a key re-created meanwhile (listed with
// another UID). A listed object of the stored UID, resourceVersion and
// content is the stored one (a resourceVersion alone is not enough: an etcd
// restore without --bump-revision gives old ones out again).
//
// The store keeps objects small for as long as it holds them: managedFields
// go. With Share (an option, off by default) it also keeps one copy of what
// they repeat: the namespace and type strings are interned, and objects
// whose labels are equal hold one map between them (package share says how
// the table of shared label maps is bounded).
//
// Objects in the Store are shared with every reader (and, with Share, their
// label maps with each other and with a watch stream's decoder:
// Store.SharesLabels): treat them as read-only and DeepCopy before changing
// anything. The mutation detector (package detect, on in every test) panics
// when a reader did not. An object given to the store, its labels map
// included, is the store's: the giver changes neither after.
package store
