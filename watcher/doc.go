// Package watcher is a Reflector written out by hand: it keeps a store.Store
// equal to what the API server holds for one resource, by listing everything
// once and then watching for changes, through every fault a real cluster
// produces. In client-go this is tools/cache's Reflector, inside every informer.
//
// # The picture
//
//	   ┌─────────┐ listed at RV ┌──────────┐ ◀─┐ ran its course: re-WATCH from RV
//	──▶│ Listing │ ───────────▶ │ Watching │ ──┘ at once (silent: a probe first)
//	   └─────────┘              └──────────┘ ◀───── listed at RV ───────────┐
//	     │    ▲                   │    ▲  │                                 │
//	     │    │                   │    │  │ 410, too large RV,              │
//	     │    │ broke, refused,   │    │  │ ERROR before progress,          │
//	     │    │ 5xx, 429, closed  │    │  │ the server behind us:   ┌───────────┐
//	     │    │ too soon; a 410   │    │  └────────────────────────▶│ Relisting │
//	     │    │ again before a    │    │    at once; after trouble, └───────────┘
//	     │    │ healthy stream    │    │    after a random part        │    ▲
//	     │    │                   │    │    of the last step           │    │
//	     ▼    │                   ▼    │                               ▼    │
//	   ┌──────────────────────────────────────────────────────────────────────────┐
//	   │ BackingOff: wait out the backoff, then retry what failed                 │
//	   └──────────────────────────────────────────────────────────────────────────┘
//	From any state, when the loop's context ends: Stopped.
//
// The decisions are one pure state machine, Machine: the loop (Watcher.Run)
// performs the Action it returns (List, WatchList, Watch, KeepReading, Probe,
// Wait, Stop) and feeds back the Outcome, with the time: the machine is
// tested without a server, the loop in virtual time under random faults
// (explore_test.go). docs/watcher.md holds the table of every decision.
// Every change goes into the store, then to Options.Handler.
//
// # resourceVersion rules
//
//   - A list asks for resourceVersion "" (the latest data, read from etcd) in
//     pages of Options.PageSize. (client-go asks for "0": the watch cache,
//     unpaginated.)
//   - A WATCH starts at the list's resourceVersion, with bookmarks and a
//     timeout drawn between 5 and 10 minutes. Every event and bookmark moves
//     the resourceVersion the next WATCH starts from: a broken stream is
//     resumed, not relisted.
//   - 410 Gone, "too large resource version", or an ERROR event before the
//     stream moved us on: the server cannot go on from here. Relist: at once
//     after a healthy stream (a compaction); right after trouble (a restart,
//     met by a whole fleet) after a random part of the last backoff step.
//     An ERROR after progress re-watches from there; a second in a row relists.
//   - A list that fails midway resumes from the page that failed; an expired
//     continue token restarts it from page one at once, once.
//   - After a WATCH that could not open, or a silent one, a probe (a LIST of
//     one item) asks the server's resourceVersion. A server behind ours (an
//     etcd restore) means relist: objects only the store holds are Deleted.
//
// # Healthy streams and the bounds
//
// A stream is healthy if it ran its course: it ended near its timeout (in its
// last tenth) or stayed
// open 2 minutes (Backoff.ResetAfter), whatever it delivered. Any
// other end is trouble: the n-th in a row waits min(30 s, 1.6 s·2ⁿ), shortened
// by up to half at random, at least a 429's Retry-After; n restarts after two
// minutes without trouble. A stream silent for Options.SilenceLimit (150 s;
// kube-apiserver bookmarks every minute) is abandoned, and a probe follows.
//
// The explorer holds these bounds on thousands of random fault schedules:
//
//   - Under any persistent fault, at most 40 requests in any minute (at most
//     seven waits, at most five requests between two); once the cap is
//     reached, four retries a minute.
//   - Once the faults stop, the next request comes within 30 s (or the
//     Retry-After, or the silence limit), and one list puts the store in sync.
//
// # Beyond the normal path
//
// With Options.WatchList (KEP-3157) the list is a WATCH with
// sendInitialEvents=true; one that fails falls back to LIST until a stream
// runs healthy.
//
// Options.Codec decodes pages and streams. The default, JSONCodec, reads them
// as client-go does (metav1.WatchEvent, sigs.k8s.io/json, apierrors.FromObject
// for an ERROR); an object that does not decode is logged and skipped, and a
// garbled DELETED still deletes its key. Package codec holds faster ones,
// and CBOR.
//
// docs/watcher.md walks the normal path, then says why each rare rule is so.
package watcher
