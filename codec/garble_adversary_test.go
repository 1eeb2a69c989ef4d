package codec_test

import (
	"io"
	"rawwatch/codec"
	"testing"
	"time"
)

// A finding of the fault scorecard (docs/scorecard.md, garble): a watch
// frame cut in half, followed by whole frames on a stream that stays open,
// was never noticed. FrameReader followed braces and quotes only, so the
// half frame swallowed every frame after it, and the loop heard nothing
// until its watchdog abandoned the silent stream (150 s; the scorecard's raw
// clients caught up 130 s after the fault, where client-go's informers,
// whose decoder fails on the syntax, re-watched at once). It failed with:
//
//	a half frame then two whole ones, the stream open: Next returned
//	nothing in 2s (it waits for the half frame's end)
//
// Fixed in frames.go (the reader checks the JSON grammar, control bytes in
// strings and line framing); frames_test.go has the garble shapes.
func TestAdversaryAHalfFrameSwallowsTheFramesAfterIt(t *testing.T) {
	r, w := io.Pipe()
	defer w.Close()
	go func() {
		io.WriteString(w, `{"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVer`+"\n")
		for range 2 {
			io.WriteString(w, `{"type":"MODIFIED","object":{"metadata":{"name":"b","resourceVersion":"7"}}}`+"\n")
		}
	}()
	f := codec.NewFrameReader(r, 0)
	done := make(chan error, 1)
	go func() { _, err := f.Next(); done <- err }()
	select {
	case <-done: // a frame or an error: either lets the loop act
	case <-time.After(2 * time.Second):
		t.Fatal("a half frame then two whole ones, the stream open: Next returned nothing in 2s (it waits for the half frame's end)")
	}
}
