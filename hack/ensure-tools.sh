#!/usr/bin/env bash
# ensure-tools.sh NAME... — make sure bin/NAME exists, building it only when missing.
#
# Each program is built from the pinned tools module in hack/tools and cached twice:
# in the repository's ignored bin/ folder, and in the user cache dir under a key that
# names the program's version, so a fresh clone (CI's, say) reuses an earlier build.
# kube-apiserver takes about 5 minutes to build on two cores; everything else is quick
# once it is built (the node's kubelet, kube-controller-manager, kube-scheduler and
# kube-proxy share most of its packages, all built with cgo off like the rest).
# The versions are written in one place, hack/tools/go.mod; this script reads them.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/hack/tools"
bin="$root/bin"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/rawwatch/bin"
mkdir -p "$bin" "$cache"

# required MODULE: the version hack/tools/go.mod requires (read without the go
# command, which would want the whole module graph, network and all).
required() {
	local v
	v=$(awk -v m="$1" '$1 == "require" && $2 == m { print $3; exit } $1 == m { print $2; exit }' "$tools/go.mod")
	if [ -z "$v" ]; then
		echo "ensure-tools: $1 is not required in hack/tools/go.mod" >&2
		exit 1
	fi
	echo "$v"
}
k8s_version=$(required k8s.io/kubernetes)
etcd_version=$(required go.etcd.io/etcd/server/v3)
controller_tools_version=$(required sigs.k8s.io/controller-tools)
goversion=$(go env GOVERSION)

for name in "$@"; do
	case "$name" in
	kube-apiserver|kubectl|kubelet|kube-controller-manager|kube-scheduler|kube-proxy)
	                pkg=k8s.io/kubernetes/cmd/$name version=$k8s_version ;;
	etcd)           pkg=go.etcd.io/etcd/server/v3            version=$etcd_version ;;
	controller-gen) pkg=sigs.k8s.io/controller-tools/cmd/controller-gen version=$controller_tools_version ;;
	*) echo "ensure-tools: unknown tool $name" >&2; exit 2 ;;
	esac
	cached="$cache/$name-$version-$goversion"
	if [ -x "$bin/$name" ] && [ -f "$bin/.$name.version" ] && [ "$(cat "$bin/.$name.version")" = "$version-$goversion" ]; then
		continue
	fi
	if [ ! -x "$cached" ]; then
		ldflags="-s -w"
		case "$version" in
		"$k8s_version")
			# Without these the server reports v0.0.0-master, which kubectl cannot parse.
			v=k8s.io/component-base/version
			IFS=. read -r major minor _ <<<"${k8s_version#v}"
			ldflags="$ldflags -X $v.gitVersion=$k8s_version -X $v.gitMajor=$major -X $v.gitMinor=$minor"
			ldflags="$ldflags -X $v.gitTreeState=clean -X $v.buildDate=1970-01-01T00:00:00Z"
			;;
		esac
		echo "ensure-tools: building $name $version (kube-apiserver takes ~5 min on 2 cores)" >&2
		(cd "$tools" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$cached.tmp.$$" "$pkg")
		mv "$cached.tmp.$$" "$cached"
	fi
	cp "$cached" "$bin/$name.tmp.$$"
	mv "$bin/$name.tmp.$$" "$bin/$name"
	echo "$version-$goversion" > "$bin/.$name.version"
done
