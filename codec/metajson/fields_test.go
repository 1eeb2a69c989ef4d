package metajson

import (
	"strings"
	"testing"
)

// Through a FieldsCache, a fieldsV1 value is read as skip reads it: the
// same end, the same refusal; a text checked before is taken by one
// compare only where skip would take it again (not nested deeper than
// maxDepth allows), and a text that merely starts alike is checked.
func TestFieldsCacheReadsAsSkipReads(t *testing.T) {
	deep := strings.Repeat(`{"f:a":`, 5) + `{}` + strings.Repeat(`}`, 5)
	var c FieldsCache
	for _, in := range []struct {
		text  string
		depth int
	}{
		{`{"f:metadata":{"f:labels":{".":{},"f:app":{}}}}`, 4},
		{`{"f:metadata":{"f:labels":{".":{},"f:app":{}}}},"x":1`, 4},
		{`{"f:metadata":{"f:labels":{".":{},"f:app":{}}}}`, 2},
		{`{"f:metadata":{"f:labels":{".":{},"f:app":{}}}`, 4},   // cut short
		{`{"f:metadata":{"f:labels":{".":{},"f:app":{}}},}`, 4}, // a trailing comma
		{`{"f:metadata":{"f:labels":{".":{},"f:app":{}}}}}`, 4}, // a brace more: the value ends before it
		{deep, 4},
		{deep, maxDepth - 6}, // as deep as skip goes
		{deep, maxDepth - 5}, // deeper: skip declines, so must the cache
		{deep, 4},
		{`{"f:spec":{"\u0066":{}}}`, 4},
		{`{"f:spec":{"\u0066":{}}}`, 4},
		{`{"f:spec":{"` + "\x01" + `":{}}}`, 4},
		{`{"k:{\"uid\":\"u\"}":{}}`, 4},
		{`{"k:{\"uid\":\"u\"}":{}}`, 4},
		{`{"a":1}`, 4}, {`{"b":1}`, 4}, {`{"c":1}`, 4}, {`{"d":1}`, 4}, {`{"e":1}`, 4}, {`{"a":1}`, 4},
	} {
		plain := NewDecoder([]byte(in.text), Options{})
		plain.depth = in.depth
		perr := plain.skip()
		cached := NewDecoder([]byte(in.text), Options{Fields: &c})
		cached.depth = in.depth
		cerr := cached.skipFields()
		if (perr == nil) != (cerr == nil) || perr == nil && plain.i != cached.i {
			t.Errorf("%q at depth %d: skip ends at %d (%v), through the cache at %d (%v)", in.text, in.depth, plain.i, perr, cached.i, cerr)
		}
	}
}
