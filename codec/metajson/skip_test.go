package metajson

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// checkSkip holds Skip, the one-loop walk, to encoding/json's grammar: a
// text it takes whole is valid JSON, and valid JSON it takes (it declines
// only nesting deeper than maxDepth), returning the value without the
// whitespace around it.
func checkSkip(t *testing.T, data []byte) {
	t.Helper()
	d := NewDecoder(data, Options{})
	var span []byte
	err := d.Whole(func() (err error) { span, err = d.Skip(); return err })
	valid := json.Valid(data)
	switch {
	case err == nil && !valid:
		t.Fatalf("Skip took %q, which encoding/json refuses", data)
	case err != nil && valid && depthOf(data) < maxDepth:
		t.Fatalf("Skip declined %q, valid JSON of depth %d", data, depthOf(data))
	case err == nil && !bytes.Equal(span, bytes.TrimLeft(bytes.TrimRight(data, " \t\r\n"), " \t\r\n")):
		t.Fatalf("Skip of %q returned %q", data, span)
	}
}

// depthOf is the deepest nesting of brackets outside strings in valid JSON.
func depthOf(data []byte) int {
	depth, deepest, in, esc := 0, 0, false, false
	for _, c := range data {
		switch {
		case esc:
			esc = false
		case in && c == '\\':
			esc = true
		case c == '"':
			in = !in
		case !in && (c == '{' || c == '['):
			depth++
			deepest = max(deepest, depth)
		case !in && (c == '}' || c == ']'):
			depth--
		}
	}
	return deepest
}

var skipCases = []string{
	`{}`, `[]`, ` { } `, `[ ]`, `{"a":1}`, `{"a":[1,2,{"b":null}],"c":"\u00e9\n"}`, `"x"`, `-0.5e+3`, `1E5`, `true`, `false`, `null`,
	`{"a":1,}`, `[1,]`, `[,1]`, `{,}`, `{"a"}`, `{"a":}`, `{"a" 1}`, `{1:2}`, `[}`, `{]`, `[1 2]`, `{"a":1 "b":2}`,
	`01`, `-`, `1.`, `.5`, `1e`, `1e+`, `+1`, `tru`, `nul`, `falsey`, `"\x"`, `"\u12"`, `"a` + "\x01" + `"`, "\"\xff\"",
	`[[[[[]]]]]`, `[[[[[]]]]`, `{"a":{"b":{"c":{}}}}}`, `[1]]`, `{"a":1}{`, `"` + strings.Repeat("a", 300) + `"`,
	strings.Repeat(`[`, 999) + strings.Repeat(`]`, 999), strings.Repeat(`[`, 1000) + strings.Repeat(`]`, 1000),
	strings.Repeat(`{"k":`, 1100) + `1` + strings.Repeat(`}`, 1100), strings.Repeat(`[`, 70) + strings.Repeat(`]`, 69),
	strings.Repeat(`[{"a":`, 40) + `1` + strings.Repeat(`}]`, 40), strings.Repeat(`[{"a":`, 40) + `1` + strings.Repeat(`]}`, 40),
}

func TestSkipAgreesWithEncodingJSON(t *testing.T) {
	for _, c := range skipCases {
		checkSkip(t, []byte(c))
	}
}

// go test ./codec/metajson -run '^$' -fuzz FuzzSkip -fuzztime 2m
func FuzzSkip(f *testing.F) {
	for _, c := range skipCases {
		f.Add([]byte(c))
	}
	f.Fuzz(checkSkip)
}
