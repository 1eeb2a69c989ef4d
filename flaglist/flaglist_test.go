package flaglist

import (
	"slices"
	"testing"
)

func TestSplit(t *testing.T) {
	for v, want := range map[string][]string{
		"":                 nil,
		" , ,":             nil,
		"a":                {"a"},
		" a , b,,c ":       {"a", "b", "c"},
		"example.com/x,y ": {"example.com/x", "y"},
	} {
		if got := Split(v); !slices.Equal(got, want) || (want == nil) != (got == nil) {
			t.Errorf("Split(%q) = %q, want %q", v, got, want)
		}
	}
}
