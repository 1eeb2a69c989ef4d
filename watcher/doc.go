// Package watcher is a Reflector written out by hand: it keeps a store.Store
// equal to what the API server holds for one resource, by listing everything
// once and then watching for changes, forever, through every fault a real
// cluster produces. In client-go this is tools/cache's Reflector, hidden
// inside every informer.
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
// performs the Action it returns (List, WatchList, Watch from a
// resourceVersion, KeepReading, Probe, Wait, Stop) and feeds back the
// Outcome, with the time. "The backoff elapsed" is just the outcome of a
// Wait. Nothing else decides: the loop has no rules of its own, so the
// machine is tested without a server (machine_test.go) and the whole loop in
// virtual time against an in-memory server under random fault schedules
// (explore_test.go).
//
// A state carries the data its decisions need. A list: restarted (it
// restarted once, at once, after an expired continue token), forStart (it is
// the relist of a server that said it had just started). The streams from a
// list: first (the WATCH in flight is the first from it), fresh (the list
// was for a starting server, and no stream has opened since), errored (a
// stream ended in an ERROR after it carried us on). A wait: what it waits
// for. Beside the states the machine keeps relisted (the relist at once
// after a 410 is spent until a stream runs healthy), how lists are made
// (WatchList, or LIST: for good, or until a stream runs healthy; "list"
// below is either), and the backoff ("after trouble": its last step is
// not reset yet).
//
// In the table, a stream that "ran its course" ended at (or a little before)
// its timeout; "open 2m then cut" broke after the backoff's ResetAfter
// (healthy all the same); "closed early" ended cleanly long before its
// timeout; "starting" and "paths missing" are kube-apiserver's words that it
// has just started (429 "storage is (re)initializing", 503 "before all known
// HTTP paths have been installed"). For a WATCH, 410 and the ERRORs are
// events in its stream; too large RV, refused, 500, starting, paths missing,
// 429, 403 and 400 answer a WATCH that did not open. "back off" waits out
// the backoff (trouble: the next wait is longer), "stagger" a random part of
// the last step (no trouble); +x and -x set and clear the data x.
//
// Every decision of Machine.Step (machine_table_test.go holds this table to it):
//
//	state: in flight, data
//	  outcome                                   next action                     state after, data
//	Listing: list
//	  ok, behind RV                             watch from RV                   Watching
//	  410, too large RV                         list                            +restarted
//	  any other                                 back off, then resume the list  BackingOff
//	Listing: list, restarted (as Listing: list, but:)
//	  410, too large RV                         back off, then list             BackingOff
//	Relisting: list (as Listing: list, but:)
//	  behind RV                                 watch from RV                   Watching, time travel
//	Listing: watch-list
//	  initial events ended                      keep reading                    Watching
//	  starting, 429, 403                        back off, then list             BackingOff
//	  400                                       list                            LIST for good
//	  any other                                 list                            LIST until healthy
//	Watching: watch
//	  ran its course                            watch from RV
//	  open 2m then cut, cut, closed early       back off, then watch from RV    BackingOff
//	  silent                                    probe
//	  410, ERROR before progress, too large RV  list                            Relisting, +relisted
//	  ERROR after progress                      back off, then watch from RV    BackingOff, +errored
//	  starting, paths missing                   back off, then list             BackingOff, +relisted, +forStart
//	  any other                                 back off, then probe            BackingOff
//	Watching: keep reading (as Watching: watch)
//	Watching: watch, after trouble (as Watching: watch, but:)
//	  410, ERROR before progress, too large RV  stagger, then list              Relisting, +relisted
//	Watching: watch, relisted (as Watching: watch, after trouble, but:)
//	  ran its course                            watch from RV                   -relisted
//	  open 2m then cut                          back off, then watch from RV    BackingOff, -relisted
//	  silent                                    probe                           -relisted
//	  410, ERROR before progress, too large RV  back off, then list             BackingOff
//	  starting, paths missing                   back off, then list             BackingOff, +forStart
//	Watching: watch, errored (as Watching: watch, after trouble, but:)
//	  ran its course                            watch from RV                   -errored
//	  open 2m then cut                          back off, then watch from RV    BackingOff, -errored
//	  silent                                    probe                           -errored
//	  ERROR after progress                      stagger, then list              Relisting, +relisted
//	Watching: watch, fresh (as Watching: watch, relisted, but:)
//	  ran its course                            watch from RV                   -relisted, -fresh
//	  open 2m then cut                          back off, then watch from RV    BackingOff, -relisted, -fresh
//	  cut, closed early                         back off, then watch from RV    BackingOff, -fresh
//	  silent                                    probe                           -relisted, -fresh
//	  410, ERROR before progress                back off, then list             BackingOff, -fresh
//	  ERROR after progress                      back off, then watch from RV    BackingOff, -fresh, +errored
//	  starting, paths missing                   back off, then watch from RV    BackingOff
//	Watching: probe
//	  ok                                        watch from RV
//	  behind RV                                 list                            Relisting
//	  starting, paths missing                   back off, then list             BackingOff, +relisted, +forStart
//	  any other                                 back off, then probe            BackingOff
//	Watching: probe, fresh (as Watching: probe, but:)
//	  starting, paths missing                   back off, then watch from RV    BackingOff
//	BackingOff: wait
//	  done                                      what it waited for              its state
//	Relisting: wait (as BackingOff: wait)
//	any
//	  canceled                                  stop                            Stopped
//
// # resourceVersion rules
//
//   - Every list asks for resourceVersion "" (the latest data, a consistent
//     read from etcd), with limit (Options.PageSize, default 500), following
//     continue tokens. client-go's first list asks for "0" (the watch cache),
//     which kube-apiserver serves in one unpaginated response whatever the
//     limit; a relist "not older than" an old resourceVersion can be served
//     from etcd at exactly that version, and the WATCH after it expires again,
//     forever (an apiserver restart showed it).
//   - A WATCH starts at the list's resourceVersion, with
//     allowWatchBookmarks=true and timeoutSeconds drawn between
//     WatchTimeoutMin and WatchTimeoutMax (5 to 10 minutes) so that clients do
//     not reconnect in step. Every event and bookmark moves the resourceVersion
//     a re-WATCH starts from.
//   - 410 Gone / Expired (a response, or an ERROR event in the stream): the
//     server no longer has the history after our resourceVersion (etcd
//     compacted it; a restarted apiserver's watch cache starts later). Any
//     other ERROR event (a 500: "etcd event received with PrevKv=nil" when
//     compaction stopped exactly at the next change) that comes before the
//     stream moved our resourceVersion on means the same: the server cannot
//     go on from here. Relist. One that comes after (the stream carried an
//     event or a bookmark past where it began) is a broken stream: re-watch
//     from there after the backoff; if the server cannot go on from there
//     either, that WATCH's ERROR comes first, and relists. Once: a second
//     stream in a row that ends so relists too, or a server sending an ERROR
//     after every event would keep the store one event a wait behind.
//   - An expired continue token restarts the list at once from page one, in
//     the first list and in a relist alike; a second failure in a row backs off.
//   - A list that fails on the way for any other reason (refused, cut, 5xx,
//     429) keeps the pages it read and, after the backoff, resumes from the
//     page that failed: the continue token still serves the same snapshot
//     until etcd compacts it. A list longer than the gaps between a server's
//     outages completes all the same (client-go's pager, and so its
//     Reflector, starts again from the first page: under an outage every few
//     seconds, a long list never completes).
//   - Time travel. After an etcd restore from a snapshot the server's
//     resourceVersion goes back, and ours is "in the future". The loop asks
//     where the server is whenever it may be another server: after a WATCH
//     that could not open (refused, failed: the apiserver restarting on the
//     restored etcd), the first request that gets through is a probe, a LIST
//     of one item, whose resourceVersion is the server's (or, when the server
//     said it has just started, "storage is (re)initializing" or "before all
//     known HTTP paths have been installed", the relist itself: its watch
//     cache begins after our resourceVersion, and a WATCH from there would
//     meet 410; the list tells the server's resourceVersion as the probe
//     would, two requests sooner; a WATCH from that list answered in the
//     same words tries again); and after a silent
//     stream (a watch cache accepts a WATCH from the future and sends
//     nothing until it gets there: an HA apiserver whose cache lags the one
//     that listed does so too, and is waited out while it catches up within
//     the silence limit; TestALaggingWatchCacheIsWaitedOut). Compared by apimachinery's
//     CompareResourceVersion (both well-formed integers, as every
//     kube-apiserver's are), a server behind us means relist: the loop logs
//     the time travel, and the replacement of the store reports every object
//     that exists only in the store as Deleted, with its UID, and takes one
//     written again at a reused resourceVersion (store.Replacement.Add).
//     TestTimeTravelAfterAnEtcdRestore: converged 7 to 10 s after the restore.
//     A restore stays invisible to a client that reconnects only after new
//     writes carried the restored server past the version it had: nothing
//     on the wire tells the two histories apart. etcd's documented restore
//     for Kubernetes (etcdutl snapshot restore --bump-revision
//     --mark-compacted) exists for that reason: every watcher then meets a
//     410 and relists.
//
// # What counts as healthy, and the backoff
//
// A stream is healthy if it ran its course: it ended on its own at its
// timeout, or stayed open for the backoff's ResetAfter (2 minutes), however
// it ended. What a stream delivered before it broke does not matter: a
// proxy that cuts every stream after its first frame, or a server that sends
// an ERROR after one event, must not look healthy, or the loop re-watches (or
// relists) at once, forever. (client-go's informer, by this measure, made
// 44,552 WATCH requests in 20 s through such a proxy.)
//
// Every other end is trouble, and trouble waits before the next request:
// d = min(30 s, 1.6 s·2ⁿ) after the n-th trouble in a row, shortened by up to
// half at random (the jitter never lengthens a wait, so 30 s is a true cap):
// the n-th wait lies in [0.8 s·2ⁿ, 1.6 s·2ⁿ], as client-go's Reflector's
// waits do (800 ms doubling, its jitter 1.0 lengthening: [d, 2d]) until the cap;
// there client-go's reach [30 s, 60 s) and these stay in [15 s, 30 s]; a
// 429 waits at least its Retry-After. n starts again after two minutes
// without trouble. The steps come from cenkalti/backoff/v4's
// ExponentialBackOff, its randomization off (it would spread a step both
// ways, past the cap); the jitter is the machine's own, from Options.Rand.
// The exceptions are the first relist after a healthy stream (it does not
// wait out the backoff, whatever it grew to while the server was away: it is
// what recovers after an outage), a WatchList that failed on the way (the
// same list is made at once with LIST, and so is every relist until a
// stream runs healthy, when the next relist tries WatchList again:
// client-go's reflector asks for a WatchList at every relist, and under
// the same trouble it fails the same way; a server that refuses WatchList
// gets LIST for good), and the
// watchdog's re-watch (below).
//
// That first relist starts at once after a 410 under a healthy stream (a
// compaction). Right after trouble it starts after a random part, uniform
// in [0, d), of the last backoff step d ("full jitter"): when an apiserver
// restarts, every client of it meets trouble and then a 410 within the same
// step, and a fleet that relisted in the same instant would make the new
// apiserver serve all its lists at once. client-go's Reflector spreads the
// same fleet over [d, 2d] by waiting its whole jittered backoff before it
// relists; this waits less (d/2 on average) for a spread as wide
// (docs/benchmarks.md measures it in a 50-client relist storm).
//
// The bounds that follow, which the explorer holds on thousands of random
// schedules (see "The explorer" below):
//
//   - Requests under any persistent fault: waits of at least 0.8, 1.6, 3.2,
//     6.4, 12.8, then 15 s (half the cap), so at most seven waits fall in
//     any minute; between two waits there are at most five requests (a WATCH
//     that meets a 410, a failed WatchList, the LIST instead, its restart
//     after an expired continue token, the next WATCH), usually one or two
//     (a probe and the WATCH after a WATCH that could not open; the probe
//     without a wait follows only a silent stream, longer than a minute).
//     So at most 40 requests in any minute; once the cap is reached, at most
//     four retries a minute: four WATCHes for a flapping stream (two LISTs
//     and four WATCHes for one whose every stream carries an event and then
//     an ERROR: each relist's WATCH follows it at once), four LISTs and four
//     WATCHes when every stream ends in an ERROR before any event.
//   - Recovery: once the faults stop, the next request comes within the 30 s
//     cap (or the server's Retry-After), or, on a stream that froze, within
//     the silence limit; the store is then in sync after one list, which
//     the stagger may put off by less than one more backoff step.
//
// # The watchdog
//
// A WATCH can stay open and deliver nothing, not even a bookmark: a
// half-dead connection, a proxy that froze. kube-apiserver's watch cache
// bookmarks every stream about every minute, so a stream silent for
// Options.SilenceLimit (default 150 s: one lost bookmark tolerated, with half
// a minute to spare) is abandoned, and at once a probe asks the server for
// its resourceVersion: behind ours, relist (time travel, above); otherwise
// re-watch from the same resourceVersion. The silence is counted across
// streams: from when the first of the streams from the same
// resourceVersion that deliver nothing, back to back, was asked for, the
// backoff waits between them included (Action.Quiet), so neither a WATCH
// timeout shorter than the limit (each stream from a server behind us ends
// at its timeout with nothing) nor a proxy that cuts idle connections,
// however often (most of the silence is then spent in the waits), can hide
// a server that went back in time: it is asked within the limit, and one
// backoff wait or the time a WATCH takes to open. A WATCH due with nothing
// left of the limit is a probe instead (Machine.SilenceLimit). Two requests
// per silence limit, no storm. It is counted (rawwatch_watch_silent_total)
// and narrated (--explain, WATCHDOG, with the silence of the streams
// before). An apiserver without a watch cache sends no bookmarks; its quiet
// streams are resumed every 150 s, which costs next to nothing.
//
// # The explorer
//
// explore_test.go runs the loop against package fakeapi's server in virtual
// time under seeded random schedules of faults, and holds every schedule to
// the request budget above, to liveness (in sync within the backoff cap
// plus the silence limit once the faults stop) and to safety (every UID an
// Added, Updates, a Deleted; every deletion reaches the handler), and to:
// no request asks for resourceVersion "0"; a garbled DELETED deletes its
// key; no UID comes back after its deletion and no object's resourceVersion
// goes backwards (outside a restore); and, against a watch cache, a quiet
// healthy stream is kept (no probe, no relist, no abandoned stream, the
// next WATCH at once after each stream that ran its course). It also holds
// the rules of the backoff (every wait at most Backoff.Max, shortened by
// its jitter, at most Initial after a calm ResetAfter), of the request log
// (no request sooner than a 429's Retry-After; a failed list resumes from
// the page that failed; after a rollback, a LIST before any WATCH), of the
// deltas (a garbled list item keeps its key; no managedFields; an Updated
// is a change; a DELETED event's delta carries its final state) and the
// write time (the newest managedFields time), and, through a consumer that
// drains the real work queue (package queue) with two workers, of the
// queue (a key waits once; one worker per key; retries spaced as the rate
// limiter says; every key's last state reconciled).
//
// The server is shaped like kube-apiserver where a client can tell: one
// global resourceVersion that writes to other resources move (so bookmarks
// carry a quiet stream past its last event); with a watch cache, bookmarks
// every minute and 2 s before a stream ends, "0" LISTs answered whole from a
// cache up to a minute behind, WATCHes 410 from before the cache's last
// restart, restarts that end every stream cleanly or that the client meets
// at its next WATCH; without one, no bookmarks and etcd's compaction; frames
// the client cannot decode, DELETEDs and list items among them; frames
// cut in half (not JSON), or spelled as Kubernetes reads alike (escapes, keys
// in another case or twice: held to Kubernetes' decoding); rollbacks (etcd
// restored without --bump-revision, resourceVersions reused); a deletion whose
// previous state etcd compacted (every WATCH from just before it gets an
// ERROR 500). What it cannot show: a
// cache whose WATCHes lag, or that drops a busy resource's history;
// kube-apiserver itself never ends a stream before its timeout as the
// client counts it (the fake's early end stands for a proxy); HTTP, compression, shard selectors, more than one resource; a
// restore that sends the resourceVersion back while the control plane stays
// up, or by less than the writes of a backoff wait (TestTimeTravel... covers
// it); an event delivered twice.
// docs/testing.md has the numbers.
//
// # What the server sends
//
// A LIST answers with one object, its items an array, its metadata holding
// the list's resourceVersion and, when more pages remain, a continue token:
//
//	{"apiVersion":"example.com/v1alpha1","kind":"MyResourceList",
//	 "items":[{...},{...}],
//	 "metadata":{"continue":"eyJ2Ijo...","resourceVersion":"466"}}
//
// A WATCH answers with a stream of frames, one JSON object each:
//
//	{"type":"ADDED","object":{...the object...}}
//	{"type":"BOOKMARK","object":{"kind":"MyResource","metadata":{"resourceVersion":"487"}}}
//	{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired",
//	                          "message":"too old resource version: 2 (216)"}}
//
// Both are decoded by the Codec in Options.Codec: DecodeList reads a page,
// DecodeEvents a stream. The default, JSONCodec (decode.go), reads them as
// client-go does: the stream split into JSON values one after another (its
// framer's json.Decoder), each frame a metav1.WatchEvent whose object, as
// every list item, goes through sigs.k8s.io/json (keys match
// case-sensitively, of a key given twice the last counts; a page is one
// JSON value), its apiVersion and kind as client-go's serializer finds them
// (keys in any case: Kind), an ERROR's object a Status when
// apierrors.FromObject says so and, anything else there, a transient
// error whatever it says. One object that does not decode costs that object
// only: it is logged and skipped, a skipped list item is not taken for a
// deletion, and a DELETED event whose object is garbled still deletes its
// key (SkipError: its name, namespace, resourceVersion and UID are each
// read on its own). A listed item of another UID than the stored object's
// says the key was deleted and created again: the relist hands the stored
// object's Deleted delta; an item whose key cannot be read keeps every
// stored object the list lacks (store.Replacement.Keep).
//
// A frame that is not JSON breaks the stream, and the loop re-watches from
// its last resourceVersion after the backoff, as after any broken stream
// (no relist): the server sends the lost events again, a DELETED among
// them. The controller decodes with package codec instead, which reads the
// same, faster (one pass over each frame, managedFields reduced as they are
// read), notices a cut frame at the cut (a strict frame reader), and reads
// CBOR (KEP-4222).
//
// WatchList (Options.WatchList, KEP-3157) gets the initial state from a WATCH
// with sendInitialEvents=true instead: one ADDED event per object, then a
// BOOKMARK annotated k8s.io/initial-events-end whose resourceVersion is the
// snapshot's; the same stream goes on with live events. One object is in
// flight at a time instead of a page.
//
// # The store and the handler
//
// Every change is applied to the store first, then handed to Options.Handler
// as a store.Delta. A (re)list is built beside the live store and swapped in
// at once (store.Replacement): keys that vanished come out as Deleted deltas
// carrying the last object we knew, marked FinalStateUnknown (client-go's
// DeletedFinalStateUnknown), and a key listed, or brought by an event,
// under another UID comes out as Deleted then Added, never as an update of
// one object into another.
//
// # A shard of the objects
//
// With Options.Shard (package shard), every LIST page and WATCH carries
// shardSelector=shardRange(object.metadata.uid, START, END) || …, and a
// kube-apiserver with the ShardedListAndWatch gate sends only the objects
// whose UID hashes into those ranges: the watcher holds, and pays for, its
// share alone. A server without the gate drops the parameter silently; the
// first object outside the ranges says so (logged once, counted as
// OutOfShard), and from then on the watcher leaves such objects out itself:
// the store is the same, but every object is still received and decoded.
package watcher
