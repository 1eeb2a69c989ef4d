#!/usr/bin/env bash
# ensure-chromium.sh — the headless browser the live page's test drives
# (app/browser_test.go): Debian's chromium, installed when missing
# and this user may (root, or sudo without a password). Otherwise it says so
# and the browser test skips with a visible message; it never fails the build.
set -uo pipefail
for b in "${RAWWATCH_CHROMIUM:-}" chromium chromium-browser google-chrome; do
	[ -n "$b" ] && command -v "$b" >/dev/null && exit 0
done
if ! command -v apt-get >/dev/null; then
	echo "ensure-chromium: no Chromium and no apt-get: the live page's browser test will be skipped" >&2
	exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
	if sudo -n true 2>/dev/null; then sudo="sudo -n"; else
		echo "ensure-chromium: no Chromium, and installing it needs root: the live page's browser test will be skipped" >&2
		exit 0
	fi
fi
echo "ensure-chromium: installing Debian's chromium for the live page's browser test (once)" >&2
export DEBIAN_FRONTEND=noninteractive
if ! $sudo apt-get install -y --no-install-recommends chromium >/dev/null 2>&1; then
	$sudo apt-get update >/dev/null 2>&1
	$sudo apt-get install -y --no-install-recommends chromium >/dev/null 2>&1 ||
		echo "ensure-chromium: installing chromium failed: the live page's browser test will be skipped" >&2
fi
exit 0
