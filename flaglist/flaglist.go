// Package flaglist reads the comma-separated lists that the commands take
// as flag values (rawwatch --cache-drop-annotations, scorecard --faults).
package flaglist

import "strings"

// Split returns the non-empty items of v, a comma-separated list, trimmed
// (nil for none).
func Split(v string) []string {
	var out []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
