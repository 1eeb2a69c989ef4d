package codec

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"rawwatch/api/v1alpha1"
	"rawwatch/watcher"
)

// chunkReader hands data out size bytes a read at most (the last read of
// a chunk returns no error; io.EOF comes alone).
type chunkReader struct {
	data string
	size int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.data[:min(r.size, len(r.data))])
	r.data = r.data[n:]
	return n, nil
}

// compareLinesIn is compareLines with the stream read in chunks of size
// bytes and frames bounded by max: Next (the line's shortcut) against next
// (every frame through the frame reader's checks), call by call.
func compareLinesIn(t *testing.T, name, data string, size, max int) {
	t.Helper()
	lines := &eventDecoder[*v1alpha1.MyResource]{frames: NewFrameReader(&chunkReader{data, size}, max), codec: codec}
	checked := &eventDecoder[*v1alpha1.MyResource]{frames: NewFrameReader(&chunkReader{data, size}, max), codec: codec}
	for i := 0; i <= len(data)+1; i++ {
		le, lerr := lines.Next()
		ce, cerr := checked.next()
		if fmt.Sprint(lerr) != fmt.Sprint(cerr) || !reflect.DeepEqual(le, ce) {
			t.Fatalf("%s (reads of %d bytes, bound %d): call %d: by the line %+v, %v\n\tchecked %+v, %v", name, size, max, i, le, lerr, ce, cerr)
		}
		if lerr != nil && !errors.As(lerr, new(*watcher.SkipError)) {
			return
		}
	}
	t.Fatalf("%s: no end after more calls than bytes", name)
}

// The inputs the checked path refuses, reports or frames in its own way,
// each after a frame that makes the stream line-framed (the shortcut
// applies only then) and before one that must come through (or not)
// alike: read whole, a byte at a time, and in chunks that cut lines
// anywhere; with the default bound and with one a little over an event.
func TestTheLineShortcutDeliversWhatTheChecksDo(t *testing.T) {
	a := ev("ADDED", `"name":"a","namespace":"ns","resourceVersion":"1"`, `,"spec":{"message":"hi"}`)
	z := ev("MODIFIED", `"name":"z","namespace":"ns","resourceVersion":"9"`, ``)
	line := func(metadata, rest string) string { return ev("ADDED", metadata, rest) }
	trim := func(s string) string { return strings.TrimSuffix(s, "\n") }
	long := line(`"name":"l","resourceVersion":"2"`, `,"spec":{"message":"`+strings.Repeat("x", 300)+`"}`)
	cases := map[string]string{
		"NUL in the name":              line(`"name":"a`+"\x00"+`b","resourceVersion":"2"`, ``),
		"NUL in a skipped member":      `{"type":"ADDED","x":"` + "\x00" + `","object":{` + objHead + `,"metadata":{"name":"b","resourceVersion":"2"}}}` + "\n",
		"NUL in the type":              `{"type":"ADD` + "\x00" + `ED","object":{` + objHead + `,"metadata":{"name":"b","resourceVersion":"2"}}}` + "\n",
		"NUL in a key":                 line(`"na`+"\x00"+`me":"b","resourceVersion":"2"`, ``),
		"NUL in the message":           line(`"name":"b","resourceVersion":"2"`, `,"spec":{"message":"`+"\x00"+`"}`),
		"tab raw in a string":          line(`"name":"b","resourceVersion":"2"`, `,"spec":{"message":"a`+"\t"+`b"}`),
		"CR raw in a string":           line(`"name":"b","resourceVersion":"2"`, `,"spec":{"message":"a`+"\r"+`b"}`),
		"DEL in a string":              line(`"name":"b","resourceVersion":"2"`, `,"spec":{"message":"a`+"\x7f"+`b"}`),
		"invalid UTF-8 in the name":    line(`"name":"b`+"\xff\xfe"+`","resourceVersion":"2"`, ``),
		"invalid UTF-8 in a label key": line(`"name":"b","resourceVersion":"2","labels":{"k`+"\xc3"+`":"v"}`, ``),
		"invalid UTF-8 in the type":    `{"type":"ADDED` + "\xff" + `","object":{` + objHead + `,"metadata":{"name":"b","resourceVersion":"2"}}}` + "\n",
		"invalid UTF-8 in a skipped":   `{"type":"ADDED","x":"` + "\xed\xa0\x80" + `","object":{` + objHead + `,"metadata":{"name":"b","resourceVersion":"2"}}}` + "\n",
		"invalid UTF-8 in the message": line(`"name":"b","resourceVersion":"2"`, `,"spec":{"message":"`+"\xc0\xaf"+`"}`),
		"two events on one line":       trim(line(`"name":"b","resourceVersion":"2"`, ``)) + line(`"name":"c","resourceVersion":"3"`, ``),
		"two events, a space between":  trim(line(`"name":"b","resourceVersion":"2"`, ``)) + " " + line(`"name":"c","resourceVersion":"3"`, ``),
		"an event, then not one":       trim(line(`"name":"b","resourceVersion":"2"`, ``)) + `{"a":1}` + "\n",
		"not one, then an event":       `{"a":1}` + line(`"name":"b","resourceVersion":"2"`, ``),
		"an event, then garbage":       trim(line(`"name":"b","resourceVersion":"2"`, ``)) + "xyz\n",
		"an event, then a closer":      trim(line(`"name":"b","resourceVersion":"2"`, ``)) + "}\n",
		"an event, then a comma":       trim(line(`"name":"b","resourceVersion":"2"`, ``)) + ",\n",
		"an event, then NUL":           trim(line(`"name":"b","resourceVersion":"2"`, ``)) + "\x00\n",
		"an event, spaces, garbage":    trim(line(`"name":"b","resourceVersion":"2"`, ``)) + " \t x\n",
		"an event, then a number":      trim(line(`"name":"b","resourceVersion":"2"`, ``)) + " 1\n",
		"an event, then a string":      trim(line(`"name":"b","resourceVersion":"2"`, ``)) + `"s"` + "\n",
		"a line over the bound":        long,
		"a line over the bound, cut":   trim(long)[:250] + "\n",
		"CRLF":                         strings.ReplaceAll(line(`"name":"b","resourceVersion":"2"`, ``), "\n", "\r\n"),
		"CR CR LF":                     trim(line(`"name":"b","resourceVersion":"2"`, ``)) + "\r\r\n",
		"a lone CR between frames":     trim(line(`"name":"b","resourceVersion":"2"`, ``)) + "\r" + line(`"name":"c","resourceVersion":"3"`, ``),
		"CR before the end of a frame": strings.Replace(line(`"name":"b","resourceVersion":"2"`, ``), "}}}", "}}\r}", 1),
		"trailing whitespace":          trim(line(`"name":"b","resourceVersion":"2"`, ``)) + " \t \r \n \n\t\n",
		"leading whitespace":           " \t\r " + line(`"name":"b","resourceVersion":"2"`, ``),
		"a blank line":                 "\n\n" + line(`"name":"b","resourceVersion":"2"`, ``),
		"an object, not an event":      `{"kind":"MyResource","metadata":{"name":"b"}}` + "\n",
		"an event with no object":      `{"type":"ADDED"}` + "\n",
		"object null":                  `{"type":"ADDED","object":null}` + "\n",
		"object empty":                 `{"type":"ADDED","object":{}}` + "\n",
		"object an array":              `{"type":"ADDED","object":[]}` + "\n",
		"another kind":                 `{"type":"ADDED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","resourceVersion":"2"}}}` + "\n",
		"an array":                     `[{"type":"ADDED"}]` + "\n",
		"a string":                     `"ADDED"` + "\n",
		"a bare word":                  "true\n",
		"a newline inside":             strings.Replace(line(`"name":"b","resourceVersion":"2"`, ``), `,"object"`, "\n"+`,"object"`, 1),
		"cut after a colon":            `{"type":"ADDED","object":` + "\n",
		"cut inside a string":          `{"type":"ADDED","object":{"metadata":{"name":"b` + "\n",
		"unknown type":                 `{"type":"WHATEVER","object":{` + objHead + `,"metadata":{"name":"b","resourceVersion":"2"}}}` + "\n",
		"type in another case":         `{"Type":"ADDED","object":{` + objHead + `,"metadata":{"name":"b","resourceVersion":"2"}}}` + "\n",
		"duplicate type":               `{"type":"ADDED","type":"DELETED","object":{` + objHead + `,"metadata":{"name":"b","resourceVersion":"2"}}}` + "\n",
		"deep nesting":                 `{"type":"ADDED","x":` + strings.Repeat("[", 1100) + strings.Repeat("]", 1100) + `,"object":{` + objHead + `,"metadata":{"name":"b","resourceVersion":"2"}}}` + "\n",
		"number with letters":          line(`"name":"b","resourceVersion":"2","generation":1e`, ``),
		"number, exponent":             line(`"name":"b","resourceVersion":"2","generation":1E2`, ``),
		"escaped quote at string end":  line(`"name":"b\\\\","resourceVersion":"2"`, `,"spec":{"message":"\\\""}`),
	}
	for name, mid := range cases {
		for _, tail := range []string{z, trim(z), ""} {
			data := a + mid + tail
			for _, size := range []int{len(data), 1, 7, 64, 200} {
				for _, max := range []int{0, 320} {
					compareLinesIn(t, fmt.Sprintf("%s, tail %d bytes", name, len(tail)), data, size, max)
				}
			}
		}
	}
}

// FuzzLinesInChunks searches for a stream, read in chunks of some size,
// that the line's shortcut delivers otherwise than the checks do (the
// other fuzz targets read a stream whole, in one read):
//
//	go test ./codec -run '^$' -fuzz FuzzLinesInChunks -fuzztime 1m
func FuzzLinesInChunks(f *testing.F) {
	a := ev("ADDED", `"name":"a","namespace":"ns","resourceVersion":"1"`, ``)
	for _, c := range fastPathCases {
		f.Add(a+c, uint16(64), uint16(0))
	}
	f.Add(a+a+a, uint16(200), uint16(160))
	f.Fuzz(func(t *testing.T, data string, size, bound uint16) {
		compareLinesIn(t, "fuzz", data, max(1, int(size)), int(bound))
	})
}

// A frame whose newline has not come yet is decoded all the same: the
// event decoder does not wait for the newline (a server may send it only
// with the next frame).
func TestAFrameIsNotHeldBackForItsNewline(t *testing.T) {
	frame := fastPathCases["plain"]
	r, w := io.Pipe()
	defer w.Close()
	go w.Write([]byte(frame + strings.TrimSuffix(frame, "\n")))
	got := make(chan error, 2)
	go func() {
		d := newEventDecoder(r, codec)
		for range 2 {
			_, err := d.Next()
			got <- err
		}
	}()
	for i, what := range []string{"the first frame", "the second frame, whole but for its newline,"} {
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("frame %d: %v", i, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s not decoded after 30 s", what)
		}
	}
}
