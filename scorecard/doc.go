// Package scorecard answers "what does each client do when the network or
// the server misbehaves?" with one table: every named fault (Faults) against
// every client (Kinds: the consumers of package compare that keep a cache —
// the raw watcher, with LIST or with WatchList, client-go's informer, with
// WatchList and without and stripping managedFields, and a
// controller-runtime manager's cache), each alone.
//
// For each fault and client (Run): a namespace of its own with the same
// objects; the client, in a process of its own, reaches a local kube-apiserver
// (watch cache on) through the fault proxy (package faultproxy) and syncs; the
// fault begins, and for its Duration a writer makes the same writes straight
// to the apiserver (one create, one update, one delete a second); the fault
// ends, and the client has Recover to show a store equal to a fresh LIST.
// An Initial fault begins before the client starts instead, so that its
// initial sync meets it; slow-consumer makes the client's own handler block.
// Recorded: the LISTs, further pages, WATCHes and WatchLists the client sent
// during the fault, counted on its own transport (a refused connection
// counts), and its busiest minute; the time from the fault's end to an equal
// store; the keys missing, extra or stale at the end; the deletions the
// handler never heard of; the events it heard after the fault and how long
// the canary took to reach the handler; the growth of the client's heap and
// its workqueue's depth during the fault; what the client logged. Verdict judges it: held, stormed, stalled or lost data, by
// thresholds written down there (StormPerMinute, Recover) that count
// requests, so that a slow machine never makes a calm client look stormy.
//
// KindNoBackoff (compare.KindNoBackoff) is a client broken on purpose (it
// re-watches at once, forever): the scorecard's own test holds the scorecard to calling it
// stormed, and the raw watcher, under the same fault, held.
//
// cmd/scorecard (make scorecard) runs it and writes the page
// (docs/scorecard.md), its numbers and a chart of requests a minute.
package scorecard
