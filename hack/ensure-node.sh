#!/usr/bin/env bash
# ensure-node.sh — what the single-node cluster (internal/node, make node,
# test/node) needs besides the programs hack/ensure-tools.sh builds: Debian's
# containerd, runc, CNI plugins, iptables and conntrack, installed when
# missing and this user is root (the node runs as root anyway). Otherwise it
# says so, and the node's tests skip with that reason; it never fails the build.
set -uo pipefail
need=()
for p in containerd:containerd runc:runc ctr:containerd iptables:iptables conntrack:conntrack; do
	command -v "${p%%:*}" >/dev/null || need+=("${p#*:}")
done
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
[ ${#need[@]} = 0 ] && exit 0
mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
	echo "ensure-node: ${need[*]} missing, and installing needs root and apt-get: the node's tests will be skipped" >&2
	exit 0
fi
echo "ensure-node: installing Debian's ${need[*]} for the single-node cluster (once)" >&2
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends "${need[@]}" >/dev/null 2>&1; then
	apt-get update >/dev/null 2>&1
	apt-get install -y --no-install-recommends "${need[@]}" >/dev/null 2>&1 ||
		echo "ensure-node: installing ${need[*]} failed: the node's tests will be skipped" >&2
fi
exit 0
