# lib.sh — what the demo scripts share. Source it from the repository root:
# background processes stopped on exit, headings, a local control plane.

pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# waitfor SECONDS CMD...: poll until CMD succeeds (quietly).
waitfor() {
	local tries=$(($1 * 4)); shift
	for _ in $(seq 1 "$tries"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.25; done
	echo "demo: timed out waiting for: $*" >&2
	return 1
}

# start_controlplane KUBECONFIG LOG [FLAG...] starts cmd/controlplane in the
# background and returns once it has written KUBECONFIG (it is ready then).
start_controlplane() {
	local kubeconfig=$1 log=$2
	shift 2
	rm -f "$kubeconfig"
	go build -o bin/controlplane ./cmd/controlplane
	bin/controlplane --kubeconfig "$kubeconfig" "$@" 2>"$log" &
	pids+=($!)
	for _ in $(seq 1 120); do [ -s "$kubeconfig" ] && break; sleep 1; done
	[ -s "$kubeconfig" ] || { cat "$log"; exit 1; }
	sleep 0.2 # the line after the kubeconfig
	cat "$log"
}

# live_page LOG prints the live page's URL once the controller logging to LOG
# serves it (--ui-bind-address): open it to watch the mechanics as they happen.
live_page() {
	local addr=""
	for _ in $(seq 1 40); do
		addr=$(sed -nE 's/.*"Serving the live page[^"]*" address="([^"]+)".*/\1/p' "$1" | tail -1)
		[ -n "$addr" ] && break
		sleep 0.25
	done
	[ -n "$addr" ] && printf '\n\033[1m   The live page: %s/ui/\033[0m  (open it now: the state diagram, the timeline and the queue, as they happen)\n' "$addr"
	return 0
}

# hold keeps the demo (and its live page) up until Enter, on a terminal.
hold() {
	if [ -t 0 ]; then
		read -r -p $'\nThe live page stays up until you press Enter. ' _ || true
	fi
}
