package codec

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/api/v1alpha1"
	"rawwatch/codec/metajson"
	"rawwatch/internal/kuberef"
	"rawwatch/watcher"
	"rawwatch/wire"
)

// Fuzz tests of the decoding path: whatever bytes a server (or something in
// between) sends, the decoders never panic, never loop without consuming
// input, and never hand out an object that is not a MyResource. The seeds
// are kube-apiserver's LIST pages and WATCH streams recorded in the
// repository's testdata/wire (package wire), whole and frame by
// frame, and the corpus in testdata/fuzz/ (hand-made bad frames and inputs
// the fuzzer found); `go test` runs the seeds, and
//
//	go test ./codec -run '^$' -fuzz FuzzEventDecoder -fuzztime 5m
//
// searches for more (a failing input is saved under testdata/fuzz/ and
// becomes a regression test).

func FuzzEventDecoder(f *testing.F) {
	for _, name := range []string{wire.WatchList, wire.WatchGone} {
		stream := wire.MustRead(f, name)
		f.Add(stream)
		for _, frame := range wire.Frames(stream) {
			f.Add(frame)
		}
	}
	for _, g := range garbledFrames { // garbled streams (frames_test.go)
		f.Add([]byte(whole + g.garbage + whole + whole2))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dec := newEventDecoder(bytes.NewReader(data), codec)
		// Every call consumes at least one byte or ends the stream.
		for calls := 0; ; calls++ {
			if calls > len(data)+1 {
				t.Fatalf("%d calls to Next on %d bytes: the decoder is not making progress", calls, len(data))
			}
			ev, err := dec.Next()
			var skip *watcher.SkipError
			if errors.As(err, &skip) {
				checkSkip(t, skip)
				continue
			}
			if err != nil {
				return // io.EOF, or a broken stream the watcher re-watches after
			}
			checkEvent(t, ev)
		}
	})
}

// FuzzDecodeList holds both codecs' DecodeList to Kubernetes' decoding of
// a LIST page (kubernetesList), and decodes every page a second time with
// the fast codec as a watcher does, its items' labels through one
// LabelCache (JSON.SharesLabels), requiring the same items and skips: the
// cache only shares maps.
func FuzzDecodeList(f *testing.F) {
	f.Add(wire.MustRead(f, wire.ListPage1))
	f.Add(wire.MustRead(f, wire.ListPage2))
	item := func(meta string) string { return `{` + objHead + `,"metadata":{` + meta + `}}` }
	f.Add([]byte(`{"metadata":{"resourceVersion":"9"},"items":[` + strings.Join([]string{
		item(`"name":"a","labels":{"app":"x"}`), item(`"name":"b","labels":{"app":"x"},"generation":"1"`),
		item(`"name":"c","labels":{"app":"x"},"name":"c2"`), item(`"name":"d","labels":{"app":"x"}`),
		item(`"name":"e","labels":{"app":"x\u0041"}`), item(`"name":"f","labels":{"app":"x\u0041"}`), item(`"name":"g","labels":{"app":"y"}`)}, ",") + `]}`))
	f.Add([]byte(`{"metadata":{"resourceVersion":"9","ResourceVersion":"8","Continue":"x"},"items":[` + item(`"name":"a","uid":7`) + `],"items":[` +
		item(`"name":"b","resourceVersion":5`) + `,null,1],"Items":[]} `))
	f.Add([]byte(`{"items":5,"items":[],"metadata":{"resourceVersion":"1"},"metadata":{"continue":"c"}}{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		meta, items, skipped, err := decodePage(data, codec)
		for _, obj := range items {
			checkObject(t, obj)
		}
		for _, skip := range skipped {
			checkSkip(t, skip)
		}
		skips := identities(skipped)
		labelled := codec
		labelled.labels = new(metajson.LabelCache)
		_, litems, lskipped, lerr := decodePage(data, labelled)
		lskips := identities(lskipped)
		if (err == nil) != (lerr == nil) || !reflect.DeepEqual(items, litems) || !reflect.DeepEqual(skips, lskips) {
			t.Fatalf("with the labels' cache: %d items, skips %+v (%v); without: %d items, skips %+v (%v)", len(litems), lskips, lerr, len(items), skips, err)
		}
		if d := pageDiffers(data, meta, items, skips, err); d != "" {
			t.Fatal(d)
		}
		if d := listsDiffer(data); d != "" { // the watcher's own codec too
			t.Fatal(d)
		}
	})
}

// decodePage is decodeList's result for data.
func decodePage(data []byte, c watcher.Codec[*v1alpha1.MyResource]) (metav1.ListMeta, []*v1alpha1.MyResource, []*watcher.SkipError, error) {
	var items []*v1alpha1.MyResource
	var skips []*watcher.SkipError
	meta, err := decodeList(bytes.NewReader(data), c,
		func(obj *v1alpha1.MyResource) { items = append(items, obj) },
		func(skip *watcher.SkipError) { skips = append(skips, skip) })
	return meta, items, skips, err
}

// identities are skips reduced to what must agree (their Err apart).
func identities(skips []*watcher.SkipError) []watcher.SkipError {
	var out []watcher.SkipError
	for _, s := range skips {
		out = append(out, watcher.SkipError{What: s.What, Key: s.Key, RV: s.RV, UID: s.UID})
	}
	return out
}

// listsDiffer decodes a LIST page with decodeList and as Kubernetes does
// (kubernetesList), and says how they disagree ("" if they do not).
func listsDiffer(data []byte) string {
	for name, c := range map[string]watcher.Codec[*v1alpha1.MyResource]{"the fast codec": codec, "watcher.JSONCodec": plainCodec} {
		meta, items, skips, err := decodePage(data, c)
		if d := pageDiffers(data, meta, items, identities(skips), err); d != "" {
			return name + ": " + d
		}
	}
	return ""
}

// pageDiffers compares what decodeList made of data with kubernetesList.
func pageDiffers(data []byte, meta metav1.ListMeta, items []*v1alpha1.MyResource, skips []watcher.SkipError, err error) string {
	kmeta, kitems, kskips, ok := kubernetesList(data)
	switch {
	case ok != (err == nil):
		return fmt.Sprintf("decodeList: %v; Kubernetes reads the page: %v", err, ok)
	case !ok:
	case !reflect.DeepEqual(meta, kmeta):
		return fmt.Sprintf("metadata %+v, Kubernetes reads %+v", meta, kmeta)
	case !reflect.DeepEqual(items, kitems) || !reflect.DeepEqual(skips, kskips):
		return fmt.Sprintf("items %d, skips %+v; Kubernetes reads %d items, skips %+v", len(items), skips, len(kitems), kskips)
	}
	return ""
}

// kubernetesList reads a LIST page as Kubernetes does (kuberef.List), its
// skips as list items.
func kubernetesList(data []byte) (meta metav1.ListMeta, items []*v1alpha1.MyResource, skips []watcher.SkipError, ok bool) {
	meta, items, skipped, ok := kuberef.List(data)
	for _, id := range skipped {
		skips = append(skips, watcher.SkipError{What: "list item", Key: id.Key, RV: id.RV, UID: id.UID})
	}
	return meta, items, skips, ok
}

func checkObject(t *testing.T, obj *v1alpha1.MyResource) {
	t.Helper()
	if obj == nil {
		t.Fatal("nil object handed out")
	}
	if gvk := obj.GroupVersionKind(); gvk != v1alpha1.GroupVersionKind {
		t.Fatalf("object of kind %v handed out as a MyResource", gvk)
	}
}

func checkSkip(t *testing.T, skip *watcher.SkipError) {
	t.Helper()
	if skip.What == "" || skip.Err == nil || skip.Error() == "" {
		t.Fatalf("watcher.SkipError without what or why: %#v", skip)
	}
}

// The same for CBOR: whatever bytes come, the CBOR
// decoders never panic, never loop without consuming input, keep frames
// within their bound, and never hand out an object that is not a
// MyResource. Seeds: the recorded captures re-encoded as the apiserver's
// CBOR (whole streams and frame by frame).
//
//	go test ./codec -run '^$' -fuzz FuzzCBOREventDecoder -fuzztime 5m

func FuzzCBOREventDecoder(f *testing.F) {
	for _, name := range []string{wire.WatchList, wire.WatchGone} {
		frames := asServerCBOREvents(f, name)
		for _, c := range frames {
			f.Add(c)
		}
		f.Add(bytes.Join(frames, nil))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const max = 1 << 10
		in := bytes.NewReader(data)
		dec := newCBOREventDecoder[*v1alpha1.MyResource](in, codec.GVK, max)
		for calls := 0; ; calls++ {
			if calls > len(data)+1 {
				t.Fatalf("%d calls to Next on %d bytes: the decoder is not making progress", calls, len(data))
			}
			before := dec.dec.NumBytesRead()
			ev, err := dec.Next()
			if n := dec.dec.NumBytesRead() - before; n > max+len(selfDescribedCBOR)+16 && err == nil {
				t.Fatalf("a frame of %d bytes passed the bound of %d", n, max)
			}
			var skip *watcher.SkipError
			if errors.As(err, &skip) {
				checkSkip(t, skip)
				continue
			}
			if err != nil {
				return
			}
			checkEvent(t, ev)
		}
	})
}

func FuzzCBORDecodeList(f *testing.F) {
	f.Add(asServerCBOR(f, wire.MustRead(f, wire.ListPage1)))
	f.Add(asServerCBOR(f, wire.MustRead(f, wire.ListPage2)))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = decodeCBORList(bytes.NewReader(data), codec.GVK,
			func(obj *v1alpha1.MyResource) { checkObject(t, obj) },
			func(skip *watcher.SkipError) { checkSkip(t, skip) })
	})
}

// checkEvent holds an event a decoder returned without an error to the
// protocol: an object that is a MyResource at the event's resourceVersion,
// a bookmark's resourceVersion, an ERROR's error, no other type.
func checkEvent(t *testing.T, ev watcher.Event[*v1alpha1.MyResource]) {
	t.Helper()
	switch ev.Type {
	case watcher.Added, watcher.Modified, watcher.Deleted:
		checkObject(t, ev.Object)
		if ev.RV != ev.Object.ResourceVersion {
			t.Fatalf("%s event RV %q, object RV %q", ev.Type, ev.RV, ev.Object.ResourceVersion)
		}
	case watcher.Bookmark:
		if ev.RV == "" {
			t.Fatal("a bookmark without resourceVersion was not skipped")
		}
	case watcher.Error:
		if ev.Err == nil {
			t.Fatal("an ERROR event without an error")
		}
	default:
		t.Fatalf("event type %q returned without a watcher.SkipError", ev.Type)
	}
}
