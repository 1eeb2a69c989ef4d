//go:build race

package watcher

const raceEnabled = true
