#!/usr/bin/env bash
# fault-demo.sh FAULT — the controller on a local control plane, behind the
# fault proxy (package faultproxy), and one fault ordered on purpose, so that
# a learner sees what the watcher does about it and that nothing is lost.
#
#   make demo-410       a 410 ERROR event in the stream, then a real 410 after an etcd compaction: relist
#   make demo-drop      the watch stream cut mid-way: re-watch from the last resourceVersion, no relist
#   make demo-refuse    the server unreachable for a while: backoff, then catch-up
#   make demo-garbage   an event that does not decode: logged, skipped, the stream goes on
#   make demo-storm     429s with Retry-After: the controller waits as it is told
#   and each fault of the scorecard (docs/scorecard.md), on for 15 s while an object changes:
#   make demo-flap-cut           every watch cut after its first frame
#   make demo-flap-error         every watch ended by a 500 ERROR event after its first event
#   make demo-freeze             watch streams open and silent
#   make demo-watchlist-end      WatchLists end before their initial-events-end bookmark
#   make demo-watch-410          every WATCH from before a change answered 410, as after a compaction
#   make demo-too-large-rv       a WATCH from a resourceVersion silent, a LIST from one 504 "Too large resource version"
#   make demo-429                every request answered 429 by API Priority and Fairness, Retry-After 1 s
#   make demo-500                every request answered 500
#   make demo-garble             every event frame cut in half
#   make demo-apiserver-restart  the apiserver killed and started again
#   make demo-etcd-restore       etcd restored from a snapshot: resourceVersions go back
#   make demo-slow-consumer      every API write the reconciler makes takes 2 s
#   make demo-initial-flap-cut   the controller starts while every watch is cut after its first frame
#   make demo-faults    all of them, one after the other
#
# Everything runs on loopback; the controller's log is out/fault-demo/controller.log.
# Faults are plain HTTP requests to the control plane (see cmd/controlplane):
# try your own while it runs, e.g. curl -X POST http://$(cat out/fault-demo/kubeconfig.faults)/cut
set -euo pipefail
cd "$(dirname "$0")/.."

# How the controller narrates what it does: --explain (see package explain)
# prints every list page, watch, event, relist, backoff and retry as it happens.
narrate=--explain

case "${1:-}" in
410 | drop | refuse | garbage | storm | all) ;;
flap-cut | flap-error | freeze | watchlist-end | watch-410 | too-large-rv | 429 | 500 | garble | apiserver-restart) ;;
etcd-restore | slow-consumer | initial-flap-cut) ;;
*)
	sed -n '2,27p' "$0" >&2
	exit 2
	;;
esac

dir=out/fault-demo
rm -rf "$dir"
mkdir -p "$dir"
source hack/lib.sh

explain() { printf '%s\n' "$*" | fold -s -w 100; }
k() { bin/kubectl --kubeconfig "$dir/kubeconfig-direct" "$@"; }
fault() {
	printf '\033[2m$ curl -X POST http://%s/%s\033[0m\n' "$faults" "$1"
	curl -sS --fail-with-body -X POST "http://$faults/$1"
}
# show prints what the controller logged since the last call, after a pause.
shown=0
show() {
	sleep "${1:-3}"
	local total
	total=$(wc -l <"$dir/controller.log")
	printf '\033[2m--- controller log ---\033[0m\n'
	sed -n "$((shown + 1)),${total}p" "$dir/controller.log" | grep -v 'Feature gate default state' | sed 's/^/  /' || true
	shown=$total
}
# wait_watching waits until the controller has a WATCH open through the proxy.
wait_watching() {
	for _ in $(seq 1 150); do
		curl -sS "http://$faults/counts" | grep -q '"OpenWatches":[1-9]' && return
		sleep 0.2
	done
	echo "(no watch open after 30 s)"
}
# wait_reconciled NAME MESSAGE waits until the controller has written the status for that spec.
wait_reconciled() {
	for _ in $(seq 1 120); do
		[ "$(k get myresource "$1" -o jsonpath='{.status.message}')" = "$2" ] && return
		sleep 0.5
	done
	echo "(not reconciled after 60 s)"
}
counts() { printf '\033[2mwhat the proxy saw and did: %s\033[0m\n' "$(curl -sS "http://$faults/counts")"; }
edit() { k patch myresource "$1" --type merge -p "{\"spec\":{\"message\":\"$2\"}}" >/dev/null && echo "(edited $1: \"$2\", straight to the apiserver)"; }

say "Starting a local control plane (watch cache off) with a fault proxy in front of the apiserver"
start_controlplane "$dir/kubeconfig" "$dir/controlplane.log" --fault-proxy 127.0.0.1:0 --no-watch-cache
faults=$(cat "$dir/kubeconfig.faults")

k apply -f testdata/samples/myresources.yaml >/dev/null
k delete myresource broken >/dev/null # its retries on purpose would crowd the log
touch "$dir/controller.log"
# start_controller starts the controller through the proxy and waits until
# it has reconciled hello (or 30 s); its log goes on in the same file.
ctrl=""
start_controller() {
	say "Starting the controller through the proxy ($narrate; log: $dir/controller.log)"
	bin/rawwatch --kubeconfig "$dir/kubeconfig" --namespace default "$narrate" \
		--ui-bind-address "${UI_ADDR:-127.0.0.1:0}" --secure-serving=false >>"$dir/controller.log" 2>&1 &
	ctrl=$!
	pids+=($ctrl)
	live_page "$dir/controller.log"
	for _ in $(seq 1 60); do
		[ "$(k get myresource hello -o jsonpath='{.status.phase}' 2>/dev/null)" = Processed ] && break
		sleep 0.5
	done
	show 1
}
[ "$1" = initial-flap-cut ] || start_controller

demo_410() {
	wait_watching
	say "410, injected: the proxy ends the watch with an ERROR event carrying 410 Expired"
	explain "The apiserver says this when the resourceVersion a watch would resume from is no longer in etcd's history. Events were lost for good; only a fresh LIST can resynchronise the store. Look for '410 GONE … → RELIST', and for the REPLACED line and the deltas that follow."
	fault expire
	show 2
	counts

	wait_watching
	say "410, for real: the controller is away while etcd compacts its history"
	explain "The proxy refuses connections; an object changes meanwhile; etcd is compacted; the controller comes back and re-watches from the resourceVersion it had. This apiserver runs without a watch cache, so that WATCH goes to etcd, which no longer has it: a real 410 (UpstreamGone below), then a relist, which brings the change."
	fault refuse
	edit hello "changed while the controller was away"
	# A second change, so that the compaction (to the latest revision) removes
	# the first one: the server then answers 410. (Compacting exactly to the
	# only change gives a 500 instead, "etcd event received with PrevKv=nil",
	# which the watcher treats the same way; a test covers that case.)
	edit greeting "also changed while the controller was away"
	fault compact
	fault accept
	wait_reconciled hello "changed while the controller was away"
	show 1
	counts
}

demo_drop() {
	wait_watching
	say "A watch stream cut mid-way"
	explain "A load balancer or a restart drops the connection. Nothing is lost: the watcher re-watches from the last resourceVersion it saw (look for CLOSED, then RE-WATCH), and the server replays what happened since. No relist: Lists stays 1."
	fault cut
	edit hello "changed after the cut"
	wait_reconciled hello "changed after the cut"
	show 1
	counts
}

demo_refuse() {
	wait_watching
	say "The server unreachable for 6 seconds"
	explain "Every attempt fails at once; the watcher backs off, 800 ms doubling (with jitter), and logs each failure. When the server is back it re-watches from its resourceVersion and catches up with what changed meanwhile."
	fault 'refuse?for=6s'
	edit greeting "changed while the server was unreachable"
	wait_reconciled greeting "changed while the server was unreachable"
	show 1
	counts
}

demo_garbage() {
	wait_watching
	say "An event that does not decode"
	explain "The proxy slips a MODIFIED event whose spec.message is a number into the stream. The watcher logs it, skips it, and goes on with the same stream: the next change still arrives, with no re-watch (Watches unchanged) and no relist."
	counts
	fault garbage
	edit hello "changed after the garbage"
	wait_reconciled hello "changed after the garbage"
	show 1
	counts
}

demo_storm() {
	wait_watching
	say "A 429 storm: every LIST and WATCH answered Too Many Requests, Retry-After 3 s, for 10 s"
	explain "The watcher waits at least as long as the server asks before each new try (the backoff may ask for longer): a few requests (Failed below), not a flood. Then it picks up where it was."
	fault 'fail?code=429&retry-after=3s&kinds=list,watch'
	fault cut
	sleep 10
	fault heal
	edit hello "changed after the storm"
	wait_reconciled hello "changed after the storm"
	show 1
	counts
}

# lasting NAME SECONDS FAULT...: the faults on for SECONDS while an object
# changes, then heal; the change must arrive, and the log shows how.
lasting() {
	local name=$1 secs=$2
	shift 2
	wait_watching
	counts
	for f in "$@"; do fault "$f"; done
	edit hello "changed during $name"
	sleep "$secs"
	show 0
	fault heal
	wait_reconciled hello "changed during $name"
	show 1
	counts
}

demo_flap_cut() {
	say "Every watch stream cut after its first frame, for 15 s"
	explain "A load balancer that drops long-lived connections, a crash-looping apiserver behind it. The open stream first ends with 410, so the watcher relists into the fault. A stream that delivered a frame and broke is not a healthy one: the watcher backs off (look at the growing delay=), it does not re-watch at once. After the heal it re-watches from its resourceVersion and the change arrives."
	lasting flap-cut 15 flap-cut expire
}

demo_flap_error() {
	say "Every watch stream ended by a 500 ERROR event after its first event, for 15 s"
	explain "etcd failing under the apiserver: one event, then an ERROR carrying a 500, then the end. The watcher backs off between tries, as for any failure, and resumes from the last resourceVersion it saw."
	lasting flap-error 15 flap-error expire
}

demo_freeze() {
	say "Watch streams open and silent, for 15 s"
	explain "A half-dead connection: no error, no event, no bookmark. Nothing tells the client; the watcher's watchdog (--silence-limit) abandons a stream that has been silent too long and opens another. When the proxy thaws, the held frames go on and the change arrives."
	lasting freeze 15 freeze
}

demo_watchlist_end() {
	say "Every WatchList ends cleanly before its initial-events-end bookmark, for 15 s"
	explain "An aggregated API server that ignores sendInitialEvents (kubernetes/kubernetes#140890). This controller gets its initial state from a paginated LIST unless started with --watch-list, so it is not touched: the 410 below makes it relist, by LIST, and go on. The scorecard's raw-watchlist and informer rows show the WatchList clients."
	lasting watchlist-end 15 watchlist-end expire
}

demo_watch_410() {
	say "Every WATCH from before the change below answered 410 as after a compaction, for 15 s"
	explain "Compaction racing the client: its resume is older than the server holds, and kube-apiserver says so as it does, with an ERROR event in a 200 stream. The compaction point is the change made right after the cut; the watcher relists (LIST) and watches from the list's resourceVersion, which the server serves."
	lasting watch-410 15 "compacted?rv=$(($(k get myresources -o jsonpath='{.metadata.resourceVersion}') + 1))" cut
}

demo_too_large_rv() {
	say "An apiserver behind the client's resourceVersion, for 15 s"
	explain "An apiserver whose watch cache is behind the client's resourceVersion (kubernetes/kubernetes#107133), as kube-apiserver answers: a WATCH from it is established and sends nothing until the cache catches up; a LIST from it waits 3 s, then 504 with the ResourceVersionTooLarge cause. The watcher waits on its silent stream; when the fault ends the stream goes on and the change arrives."
	lasting too-large-rv 15 too-large-rv cut
}

demo_429() {
	say "Every request answered 429 Too Many Requests by API Priority and Fairness, Retry-After 1 s, for 15 s"
	explain "API Priority and Fairness shedding load, as kube-apiserver answers: a plain-text 429, Retry-After 1. The watcher waits at least as long as it is told before each try, and backs off on top."
	lasting 429 15 throttle cut
}

demo_500() {
	say "Every request answered 500, for 15 s"
	explain "etcd out of quorum, a broken webhook: every request fails. The watcher backs off, 800 ms doubling, and catches up when the server answers again."
	lasting 500 15 'fail?code=500&kinds=list,watch' cut
}

demo_garble() {
	say "Every event frame cut in half, for 15 s"
	explain "A middlebox mangling a long-lived stream: frames that are not JSON. Today the watcher stalls here (docs/scorecard.md#garble): its frame reader never finds the end of a frame cut in half and swallows the frames after it, the whole ones after the heal too, silently, until its watchdog abandons the stream, 150 s after the last whole frame (--silence-limit). So the change arrives about two minutes late."
	lasting garble 15 garble
	wait_reconciled hello "changed during garble" # the watchdog's turn
	show 1
	counts
}

demo_apiserver_restart() {
	wait_watching
	say "The apiserver killed and started again"
	explain "A rolling upgrade or a crash: every connection drops, and the new apiserver's watch cache starts at the current revision. The watcher backs off while nothing answers, then re-watches from its resourceVersion (or relists if that is gone) and the change made meanwhile arrives."
	fault restart
	edit hello "changed after the apiserver restart"
	wait_reconciled hello "changed after the apiserver restart"
	show 1
	counts
}

demo_etcd_restore() {
	wait_watching
	say "etcd restored from a snapshot: time travel"
	explain "An operator restores etcd from a backup without --bump-revision. What was written after the snapshot is gone, and the resourceVersion goes back: the controller now holds a resourceVersion from the server's future, and a watch from there would wait for writes that are not coming, or hear only the ones that pass it (kubernetes/kubernetes#107457). The watcher's first request after a failure is a one-item LIST that asks where the server is; behind ours means its history went back: relist (look for 'Time travel' and RELIST). The relist brings back the snapshot's state, and the change made after the restore arrives."
	fault snapshot
	edit hello "changed after the snapshot, lost in the restore"
	printf '(30 more edits of greeting after the snapshot: the restore must take the resourceVersion back further than the restarted apiserver writes before the controller asks)\n'
	for i in $(seq 1 30); do k patch myresource greeting --type merge -p "{\"spec\":{\"message\":\"edit $i after the snapshot\"}}" >/dev/null; done
	wait_reconciled hello "changed after the snapshot, lost in the restore"
	wait_reconciled greeting "edit 30 after the snapshot"
	show 1
	fault restore
	explain "What no client can see: had the server passed the controller's resourceVersion again before it asked (few writes after the snapshot, many after the restore), the probe would find it ahead, and the watch would resume at a resourceVersion that now names other writes. Only a restore that bumps the revision (etcdutl snapshot restore --bump-revision --mark-compacted, kubernetes/kubernetes#118501) makes every client relist."
	edit hello "changed after the restore"
	wait_reconciled hello "changed after the restore"
	show 1
	counts
}

demo_slow_consumer() {
	wait_watching
	say "A slow consumer: every API write the reconciler makes takes 2 s, for 15 s"
	explain "The scorecard's slow-consumer fault blocks each client's event handler. This controller's handler only puts a key in the queue, so the demo slows what a handler or a reconcile would wait on: the writes to the apiserver (the proxy delays them by 2 s; the watch is not touched). Watch events keep arriving at once (MODIFIED, ENQUEUE); the reconciles lag behind (DONE in 2 s). The queue holds each key once: ten changes to one object while it waits make one more reconcile, not ten, so the backlog is bounded by the objects, not by the events."
	counts
	fault 'delay?d=2s&kinds=writes'
	for i in 1 2 3 4 5; do
		edit hello "change $i while the writes are slow"
		edit greeting "change $i while the writes are slow"
	done
	sleep 15
	show 0
	fault heal
	wait_reconciled hello "change 5 while the writes are slow"
	wait_reconciled greeting "change 5 while the writes are slow"
	show 1
	counts
}

demo_initial_flap_cut() {
	if [ -n "$ctrl" ]; then
		kill "$ctrl"
		wait "$ctrl" 2>/dev/null || true
	fi
	say "The controller starts while every watch stream is cut after its first frame, for 15 s"
	explain "Its initial sync meets the fault: the paginated LIST is no watch, so it syncs and reconciles; then every WATCH it opens breaks after one frame. It backs off between them (look at the growing delay=) instead of re-watching at once. A WatchList client could not even sync here: its initial events are cut after the first (the scorecard's initial-flap-cut row)."
	fault flap-cut
	start_controller
	edit hello "changed during initial-flap-cut"
	sleep 15
	show 0
	fault heal
	wait_reconciled hello "changed during initial-flap-cut"
	show 1
	counts
}

case "$1" in
all) for d in drop garbage refuse 410 storm flap-cut flap-error freeze watchlist-end watch-410 too-large-rv 429 500 garble apiserver-restart etcd-restore slow-consumer initial-flap-cut; do "demo_${d//-/_}"; done ;;
*) "demo_${1//-/_}" ;;
esac
printf '\nThe whole controller log: %s\n' "$dir/controller.log"
hold
