// Package compare answers, with numbers, what the raw approach costs or saves
// compared with client-go's informers.
//
// One run puts the same load on one API server and measures several
// consumers side by side, each in its own process so that one's garbage never
// counts against another:
//
//	raw            this project's watcher + store + queue (paginated LIST, then WATCH)
//	raw-watchlist  the same with WatchList (sendInitialEvents) instead of LIST
//	informer       a client-go SharedIndexInformer + workqueue, sample-controller
//	               style, with client-go's defaults (which use WatchList on
//	               servers that support it)
//	informer-list  the same informer with client-go's WatchListClient feature
//	               off, so it LISTs like the raw watcher does
//	informer-stripped
//	               the informer as a careful user sets it up: a transform
//	               drops managedFields (controller-runtime's
//	               cache.TransformStripManagedFields) and, where the raw
//	               store trims annotations, the same trim
//	controller-runtime
//	               a controller-runtime manager's cache and a controller
//	               built with its builder, at its defaults (crconsumer.go)
//	bare           a bare LIST + WATCH that only decodes events: the ceiling
//
// The informers and controller-runtime are the anchors (Anchors): each
// target is also checked against whichever of them did best at it.
//
// The reconcilers are replaced by no-op workers that read the object from
// the cache, as a reconciler would. Every consumer records, at its event
// handler, each event's key, type, resourceVersion and arrival time; the load
// generator records when each write was acknowledged and the resourceVersion
// it got. Joining the two gives a delivery latency for every event.
//
// The harness (Run) drives the phases: create N objects; start the consumers
// and time their initial sync; a sustained update phase; a forced relist (the
// apiserver is restarted: its watch cache starts afresh, and every watch from
// an older resourceVersion gets 410 Gone); deletes. It then checks each
// consumer's correctness — its final cache equals a fresh LIST, it saw every
// write, and every key's events arrived in resourceVersion order — and writes
// a Markdown table, JSON and an SVG chart (report.go, svg.go).
//
// Options.Wire (--wire) makes the consumers that can (CanAsk) ask for CBOR
// instead of JSON, the local control plane serving it; the report gives the
// encoding each consumer read by its responses' Content-Type
// (ByteCounter.Bodies), so that one that asked for CBOR and read JSON shows.
//
// Side by side, what the apiserver spends cannot be told apart by consumer.
// So, before the side-by-side phases, each of Options.CostKinds runs alone on
// a freshly restarted apiserver whose /metrics is scraped every 100 ms: its
// peak RSS and heap in use above idle, CPU seconds and the bytes the consumer
// read, at its initial sync and at a relist (alone.go).
//
// Three more runs, each a subcommand of cmd/compare: the relist storm
// (storm.go: M clients of one kind relist at once after an apiserver
// restart), whole-controller convergence (converge.go: the real
// controller of app, and the same reconciler on an informer and a
// workqueue, from N creates to every status Processed, at given client
// settings), and the heap per cached object against payload (sizes.go: a
// short harness run per payload size and place).
//
// NewConsumer builds any of these consumers (Kinds) for a caller outside the
// package, the same code the harness runs in its consumer processes, and the
// delivery benchmark's own variants (BenchKinds: raw-generic,
// informer-fastdecode, controller-runtime-stripped), each of which changes
// one thing of a consumer above to tell what that one thing costs.
//
// The delivery benchmarks (BenchmarkDelivery and its neighbours) measure the
// consumers alone against a fake apiserver replaying a WATCH. The tables of
// docs/benchmarks.md are every harness's own report rendered
// (RenderBenchPage, BenchSections; go run ./hack/benchdoc).
//
// This is the only package of the project that imports client-go's informer
// machinery (tools/cache, util/workqueue) and controller-runtime: they are
// the things being compared.
package compare
