package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"rawwatch/openfinding"
	"rawwatch/wire"
)

// errOpen is what an open stream says when asked for bytes it does not have
// yet: a reader that reaches it would have waited on a live stream.
var errOpen = errors.New("read past the bytes sent: on an open stream, this waits")

// openStream is data on a stream that stays open after it.
type openStream struct{ data []byte }

func (s *openStream) Read(p []byte) (int, error) {
	if len(s.data) == 0 {
		return 0, errOpen
	}
	n := copy(p, s.data)
	s.data = s.data[n:]
	return n, nil
}

// readAll reads frames until an error: the frames, and the error.
func readAll(data string) ([]string, error) {
	f := NewFrameReader(&openStream{[]byte(data)}, 0)
	var frames []string
	for {
		fr, err := f.Next()
		if err != nil {
			return frames, err
		}
		frames = append(frames, string(fr))
	}
}

const (
	whole  = `{"type":"MODIFIED","object":{"metadata":{"name":"b","resourceVersion":"7","labels":{"x":"a\"b\\"}},"spec":{"n":-1.5e+3,"ok":true,"no":null,"l":[1,{"a":[]},"s"]}}}` + "\n"
	whole2 = `{"type":"MODIFIED","object":{"metadata":{"name":"c","resourceVersion":"8"}}}` + "\n"
)

// garbledFrames are the shapes a garbled stream takes: what a middlebox,
// a crashed writer or a broken compression layer leaves of a frame (and
// what it must end in: ErrBrokenFrame or ErrBareWord). The fuzz targets
// start from them too.
var garbledFrames = map[string]struct {
	garbage string
	want    error
}{
	"cut mid-string":           {`{"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVer` + "\n", ErrBrokenFrame},
	"cut mid-value string":     {`{"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"1` + "\n", ErrBrokenFrame},
	"cut between tokens":       {`{"type":"MODIFIED","object":{` + "\n", ErrBrokenFrame},
	"cut after a colon":        {`{"type":"MODIFIED","object":` + "\n", ErrBrokenFrame},
	"cut after a key":          {`{"type":"MODIFIED","object"` + "\n", ErrBrokenFrame},
	"cut inside an array":      {`{"type":"MODIFIED","object":{"metadata":{"managedFields":[{"manager":"m"},` + "\n", ErrBrokenFrame},
	"cut after an array opens": {`{"type":"MODIFIED","object":{"metadata":{"managedFields":[` + "\n", ErrBrokenFrame},
	"cut mid-number":           {`{"type":"MODIFIED","object":{"metadata":{"generation":12` + "\n", ErrBrokenFrame},
	"cut mid-escape":           {`{"type":"MODIFIED","object":{"metadata":{"name":"a\` + "\n", ErrBrokenFrame},
	"cut, no newline":          {`{"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVer`, ErrBrokenFrame},
	"extra closing braces":     {"}}\n", ErrBareWord},
	"extra closing bracket":    {"]\n", ErrBareWord},
	"garbage bytes":            {"\x00\x01\xffgarbage\n", ErrBareWord},
	"garbage string":           {`"half a string` + "\n", ErrBrokenFrame},
	"garbage braces":           {"{{\n", ErrBrokenFrame},
	"mismatched closer":        {`{"type":"MODIFIED","object":{"a":[1}}` + "\n", ErrBrokenFrame},
	"a garbled DELETED":        {`{"type":"DELETED","object":{"apiVersion":"example.com/v1alpha1","kind":"MyResource","metadata":{"name":"doomed","namespace":"d` + "\n", ErrBrokenFrame},
}

// Garbled streams, each a whole frame (the stream is then line-framed, as
// every kube-apiserver stream is) followed by something broken and whole
// frames, the stream still open: the reader must return the whole frame
// and then an error, at once, never wait for bytes the server will not send.
func TestFrameReaderBreaksOnGarbledFrames(t *testing.T) {
	for name, c := range garbledFrames {
		t.Run(name, func(t *testing.T) {
			frames, err := readAll(whole + c.garbage + whole + whole2)
			if len(frames) != 1 || frames[0] != strings.TrimSpace(whole) || !errors.Is(err, c.want) {
				t.Fatalf("frames %q, error %v; want the whole frame, then %v", frames, err, c.want)
			}
		})
	}
}

// A cut frame whose line has ended is broken at once, before the next frame
// arrives: the stream may send nothing more for a while (a quiet resource),
// and a reader that waits for the next frame to find the cut holds the loop
// (and, with it, the cut event's successors) until then. Each garbled line
// follows a whole frame and nothing comes after it.
func TestFrameReaderBreaksAtTheCutNotAtTheNextFrame(t *testing.T) {
	for name, c := range garbledFrames {
		if !strings.HasSuffix(c.garbage, "\n") {
			continue // no line end: nothing yet says the frame is cut
		}
		t.Run(name, func(t *testing.T) {
			frames, err := readAll(whole + c.garbage)
			if len(frames) != 1 || !errors.Is(err, c.want) {
				t.Fatalf("frames %q, error %v; want the whole frame, then %v before any more bytes", frames, err, c.want)
			}
		})
	}
}

// What is not broken reads as before: values split over lines (a stream
// that never showed itself line-framed), frames back to back, strings and
// arrays as frames (the decoder skips those), every JSON token in a frame.
func TestFrameReaderReadsWellFormedStreams(t *testing.T) {
	pretty := "{\n  \"type\": \"ADDED\",\n  \"object\": {\n    \"a\": [\n      1,\n      2\n    ]\n  }\n}\n"
	for name, stream := range map[string][]string{
		"one line each":  {strings.TrimSpace(whole), strings.TrimSpace(whole2)},
		"pretty":         {strings.TrimSpace(pretty), strings.TrimSpace(pretty)},
		"back to back":   {strings.TrimSpace(whole2), strings.TrimSpace(whole2)},
		"other values":   {`"a string"`, `[1,"two",{"three":3}]`, `{}`, `[]`, `{"a":{"b":[[],{}]}}`},
		"spaces and CRs": {"{ \"a\" : [ 1 , true ] \r, \"b\" :null }", "{\t}"},
	} {
		t.Run(name, func(t *testing.T) {
			sep := "\n"
			if name == "back to back" {
				sep = ""
			}
			data := strings.Join(stream, sep)
			if name == "pretty" {
				data = pretty + pretty
			}
			frames, err := readAll(data)
			if !errors.Is(err, errOpen) || strings.Join(frames, "|") != strings.Join(stream, "|") {
				t.Fatalf("frames %q, error %v; want %q, then the wait for more", frames, err, stream)
			}
		})
	}
}

// Never worse than client-go, whose JSON framer is a json.Decoder: for
// every byte at which a recorded kube-apiserver frame can be cut, in a
// stream that stays open with whole frames after the cut, the reader ends
// the stream whenever the json.Decoder does, and no later (as many frames
// before the error or fewer); once the stream showed itself line-framed, at
// the cut itself.
func TestFrameReaderBreaksAtEveryCutNoLaterThanAJSONDecoder(t *testing.T) {
	frames := wire.Frames(wire.MustRead(t, wire.WatchList))
	if len(frames) < 4 {
		t.Fatalf("%d frames recorded, want at least 4", len(frames))
	}
	cutFrame := frames[0]
	for _, first := range []bool{true, false} {
		for k := 1; k < len(cutFrame)-1; k++ {
			var stream []byte
			if !first {
				stream = append(stream, frames[1]...)
			}
			stream = append(stream, cutFrame[:k]...)
			stream = append(stream, '\n')
			for _, f := range frames[2:] {
				stream = append(stream, f...)
			}
			got, err := readAll(string(stream))
			dec := json.NewDecoder(&openStream{bytes.Clone(stream)})
			var theirs int
			var derr error
			for {
				var v json.RawMessage
				if derr = dec.Decode(&v); derr != nil {
					break
				}
				theirs++
			}
			switch {
			case errors.Is(err, errOpen) && !errors.Is(derr, errOpen):
				t.Fatalf("cut at byte %d (first frame %v): the reader waits after %d frames, the json.Decoder broke after %d (%v)", k, first, len(got), theirs, derr)
			case errors.Is(err, errOpen):
				t.Fatalf("cut at byte %d (first frame %v): neither notices (%d frames): a shape this test cannot judge", k, first, len(got))
			case len(got) > theirs:
				t.Fatalf("cut at byte %d (first frame %v): the reader broke after %d frames, the json.Decoder after %d", k, first, len(got), theirs)
			case !first && len(got) != 1:
				t.Fatalf("cut at byte %d of a line-framed stream: %d frames before the error %v, want 1", k, len(got), err)
			}
		}
	}
}

// The frame reader's speed on a recorded stream, in memory: the ceiling of
// every consumer (BenchmarkDelivery in compare measures it over HTTP).
func BenchmarkFrameReader(b *testing.B) {
	one := wire.MustRead(b, wire.WatchList)
	var stream []byte
	for len(stream) < 8<<20 {
		stream = append(stream, one...)
	}
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		f := NewFrameReader(bytes.NewReader(stream), 0)
		for {
			if _, err := f.Next(); err != nil {
				if err != io.EOF {
					b.Fatal(err)
				}
				break
			}
		}
	}
}

// line offers the next line of a line-framed stream only, up to its
// newline (trailing spaces cut), when that newline is read already, and
// within the bound; what it offers and take returns is what Next would have
// returned.
func TestLineOffersWhatNextWouldReturn(t *testing.T) {
	const a, b, c = `{"a":1}`, `{"b":[2, "x\"y"]}`, `{"c":{}}`
	f := NewFrameReader(strings.NewReader(a+"\n"+b+" \r\n"+c+"\n"+`{"d":`), 0)
	if line, ok := f.line(); ok {
		t.Fatalf("before a newline ended a frame: line %q offered", line)
	}
	if fr, err := f.Next(); err != nil || string(fr) != a {
		t.Fatalf("Next: %q, %v", fr, err)
	}
	line, ok := f.line()
	if !ok || string(line) != b {
		t.Fatalf("line: %q, %v; want %q", line, ok, b)
	}
	f.take(line)
	if fr, err := f.Next(); err != nil || string(fr) != c {
		t.Fatalf("Next after take: %q, %v; want %q", fr, err, c)
	}
	if line, ok := f.line(); ok {
		t.Fatalf("no newline before the end: line %q offered", line)
	}
	if _, err := f.Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("the cut frame: %v, want io.ErrUnexpectedEOF", err)
	}

	f = NewFrameReader(strings.NewReader(a+"\n"+`{"long":"`+strings.Repeat("x", 100)+`"}`+"\n"), 64)
	if _, err := f.Next(); err != nil {
		t.Fatal(err)
	}
	if line, ok := f.line(); ok {
		t.Fatalf("a line over the bound offered: %q", line)
	}
}

// A watch frame cut in half, then whole frames on a stream that stays open:
// Next returns (a frame or an error) and does not wait for the half frame's
// end, so the loop re-watches at once instead of at its watchdog (150 s).
func TestAHalfFrameDoesNotHoldBackTheFramesAfterIt(t *testing.T) {
	r, w := io.Pipe()
	defer w.Close()
	go func() {
		io.WriteString(w, `{"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVer`+"\n")
		for range 2 {
			io.WriteString(w, `{"type":"MODIFIED","object":{"metadata":{"name":"b","resourceVersion":"7"}}}`+"\n")
		}
	}()
	f := NewFrameReader(r, 0)
	done := make(chan error, 1)
	go func() { _, err := f.Next(); done <- err }()
	select {
	case <-done: // a frame or an error: either lets the loop act
	case <-time.After(2 * time.Second):
		t.Fatal("a half frame then two whole ones, the stream open: Next returned nothing in 2s (it waits for the half frame's end)")
	}
}

// errIdle stands for a stream that stays open with nothing more to send: a
// reader returns it once its script is spent (Next would block there).
var errIdle = errors.New("stream open, nothing more sent")

type scripted struct{ chunks [][]byte }

func (s *scripted) Read(p []byte) (int, error) {
	if len(s.chunks) == 0 {
		return 0, errIdle
	}
	n := copy(p, s.chunks[0])
	if s.chunks[0] = s.chunks[0][n:]; len(s.chunks[0]) == 0 {
		s.chunks = s.chunks[1:]
	}
	return n, nil
}

// The first frame of a stream (not yet line-framed) cut after a colon breaks
// at the cut, as later frames do, instead of taking the next whole frame as
// its value and stalling an idle stream until a bookmark or the watchdog.
// Open (client-go's json.Decoder does the same): skipped until fixed.
func TestAFirstFrameCutAfterAColonBreaksAtTheCut(t *testing.T) {
	openfinding.Skip(t)
	whole := `{"type":"MODIFIED","object":{"metadata":{"name":"b","resourceVersion":"7"}}}` + "\n"
	for _, half := range []string{
		`{"type":"MODIFIED","object":` + "\n",
		`{"type":"MODIFIED","object":{"metadata":{"name":"a","labels":{"x":` + "\n",
		`{"type":"MODIFIED","object":{"metadata":{"name":"a","finalizers":[` + "\n",
	} {
		f := NewFrameReader(&scripted{chunks: [][]byte{[]byte(half), []byte(whole)}}, 0)
		if _, err := f.Next(); !errors.Is(err, ErrBrokenFrame) {
			t.Errorf("a first frame cut after a colon (%q), then one whole frame, the stream open: Next read everything sent and returned %q, not ErrBrokenFrame", half, err)
		}
	}
}
