package watcher

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"rawwatch/api/v1alpha1"
	"rawwatch/internal/wire"
)

// The fuzz tests of fuzz_test.go for CBOR: whatever bytes come, the CBOR
// decoders never panic, never loop without consuming input, keep frames
// within their bound, and never hand out an object that is not a
// MyResource. Seeds: the recorded captures re-encoded as the apiserver's
// CBOR (whole streams and frame by frame).
//
//	go test ./watcher -run '^$' -fuzz FuzzCBOREventDecoder -fuzztime 5m

func FuzzCBOREventDecoder(f *testing.F) {
	for _, name := range []string{wire.WatchList, wire.WatchGone} {
		var stream bytes.Buffer
		for _, frame := range wire.Frames(capture(f, name)) {
			var ev struct {
				Type   string          `json:"type"`
				Object json.RawMessage `json:"object"`
			}
			if err := json.Unmarshal(frame, &ev); err != nil {
				f.Fatal(err)
			}
			c := cborEvent(f, ev.Type, asServerCBOR(f, ev.Object))
			stream.Write(c)
			f.Add(c)
		}
		f.Add(stream.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const max = 1 << 10
		in := bytes.NewReader(data)
		dec := newCBOREventDecoder(in, codec, max)
		for calls := 0; ; calls++ {
			if calls > len(data)+1 {
				t.Fatalf("%d calls to Next on %d bytes: the decoder is not making progress", calls, len(data))
			}
			before := dec.dec.NumBytesRead()
			ev, err := dec.Next()
			if n := dec.dec.NumBytesRead() - before; n > max+len(selfDescribedCBOR)+16 && err == nil {
				t.Fatalf("a frame of %d bytes passed the bound of %d", n, max)
			}
			var skip *SkipError
			if errors.As(err, &skip) {
				checkSkip(t, skip)
				continue
			}
			if err != nil {
				return
			}
			switch ev.Type {
			case Added, Modified, Deleted:
				checkObject(t, ev.Object)
			case Bookmark:
				if ev.RV == "" {
					t.Fatal("a bookmark without resourceVersion was not skipped")
				}
			case Error:
				if ev.Err == nil {
					t.Fatal("an ERROR event without an error")
				}
			default:
				t.Fatalf("event type %q returned without a SkipError", ev.Type)
			}
		}
	})
}

func FuzzCBORDecodeList(f *testing.F) {
	f.Add(asServerCBOR(f, capture(f, wire.ListPage1)))
	f.Add(asServerCBOR(f, capture(f, wire.ListPage2)))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = decodeCBORList(bytes.NewReader(data), codec,
			func(obj *v1alpha1.MyResource) { checkObject(t, obj) },
			func(skip *SkipError) { checkSkip(t, skip) })
	})
}
