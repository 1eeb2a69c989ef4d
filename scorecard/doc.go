// Package scorecard answers "what does each client do when the network or
// the server misbehaves?" with one table: every named fault (Faults) against
// every client (Kinds: the consumers of package compare that keep a cache —
// the raw watcher, with LIST or with WatchList, client-go's informer, with
// WatchList and without and stripping managedFields, and a
// controller-runtime manager's cache).
//
// For each fault and client (Run): a namespace of its own with the same
// objects; the client, in a process of its own, reaches a local kube-apiserver
// (watch cache on) through a fault proxy of its own (package faultproxy,
// whose faults answer as kube-apiserver was recorded answering, where it
// makes them) and syncs; the fault begins, and while it lasts a writer makes
// the same writes straight to the apiserver (one create, one update, one
// delete a second); the fault ends, the writer updates the canary, and the
// client has Recover to recover: a store equal to a fresh LIST and its
// handler at the canary's resourceVersion. An Initial fault begins before
// the client starts; slow-consumer makes the client's own handler block.
// A fault's clients meet it side by side (their requests are counted each
// on its own transport), but a Shared fault's (a restart, a restore: the
// server every client reaches) one after the other.
//
// The client writes every request it sends as it begins and ends (with its
// answer) and every call of its handler, as they happen, so that a client
// that crashes leaves them behind. Measured, from the fault's start to
// Grace after the end of recovery: every request, by sort, and how they
// were spaced (retries after a failure and their waits, requests asked
// again and theirs, chained requests); the store
// against the server; the handler's last word on every key against the
// server; the canary; the client's heap and workqueue; what it logged.
// Verdict judges it: crashed (after its recovery too), lost data, stormed
// (the waits against a backoff envelope, Envelope), stalled (or hung: its
// process answering nothing) or held.
//
// Clients broken on purpose hold the judge to its rules: KindNoBackoff
// (compare.KindNoBackoff) and the test's own (a fixed-interval retry, a
// deaf or forgetful handler, a ghost re-ADD, a stuck client, a crash, a
// crash or a burst of LISTs right after recovery, a hung process), each
// called what it is while the raw watcher and client-go's kinds hold.
//
// cmd/scorecard (make scorecard) runs it and writes the page
// (docs/scorecard.md), its numbers and a chart of requests a minute.
package scorecard
