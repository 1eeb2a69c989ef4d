package codec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"rawwatch/api/v1alpha1"
	"rawwatch/client"
	"rawwatch/openfinding"
	"rawwatch/store"
	"rawwatch/watcher"
	"rawwatch/wire"
)

// cborOf encodes v as kube-apiserver does: the self-described tag, then
// the item (apimachinery's CBOR encoding, the serializer's).
func cborOf(t testing.TB, v any) []byte {
	t.Helper()
	b, err := direct.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return append(append([]byte{}, selfDescribedCBOR...), b...)
}

// cborEvent is one frame of a CBOR WATCH, as the apiserver writes it: a
// WatchEvent whose object is the object's own CBOR.
func cborEvent(t testing.TB, typ string, obj any) []byte {
	t.Helper()
	raw, ok := obj.([]byte)
	if !ok {
		raw = cborOf(t, obj)
	}
	return cborOf(t, metav1.WatchEvent{Type: typ, Object: kruntime.RawExtension{Raw: raw}})
}

func sample(name, rv string) *v1alpha1.MyResource {
	now := metav1.NewTime(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	return &v1alpha1.MyResource{
		TypeMeta: metav1.TypeMeta{APIVersion: "example.com/v1alpha1", Kind: "MyResource"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", ResourceVersion: rv, UID: types.UID("uid-" + name),
			CreationTimestamp: now, Labels: map[string]string{"app": "x"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m", Operation: metav1.ManagedFieldsOperationUpdate,
				Time: &now, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)}}}},
		Spec: v1alpha1.MyResourceSpec{Message: "hello " + rv},
	}
}

// A CBOR stream decodes to the events a JSON one does; frames that are
// well formed but not decodable events are skipped (with the object's key
// when it can be read), as in JSON, and the stream goes on; a broken or
// oversized frame ends it.
func TestCBORWatchStreamDecodesAndSkipsBadFrames(t *testing.T) {
	badSpec := map[string]any{"apiVersion": "example.com/v1alpha1", "kind": "MyResource",
		"metadata": map[string]any{"name": "bad", "namespace": "default", "resourceVersion": "12"}, "spec": 7}
	otherKind := map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "cm", "namespace": "default", "resourceVersion": "13"}}
	var stream bytes.Buffer
	for _, f := range [][]byte{
		cborEvent(t, watcher.Added, sample("a", "10")),
		cborEvent(t, watcher.Modified, badSpec), // skip, key default/bad
		cborOf(t, []any{"not", "a map"}),        // well formed, not an event: skip
		cborEvent(t, "TELEPORTED", sample("a", "14")),
		cborEvent(t, watcher.Deleted, otherKind), // skip: another kind
		cborEvent(t, watcher.Bookmark, map[string]any{"metadata": map[string]any{"resourceVersion": "15",
			"annotations": map[string]any{metav1.InitialEventsAnnotationKey: "true"}}}),
		cborEvent(t, watcher.Error, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old"}),
		cborEvent(t, watcher.Modified, sample("a", "16")),
	} {
		stream.Write(f)
	}
	d := newCBOREventDecoder[*v1alpha1.MyResource](&stream, codec.GVK, 0)
	type want struct{ typ, rv, skipKey string }
	wants := []want{{watcher.Added, "10", ""}, {watcher.Modified, "", "default/bad"}, {"", "", "-"}, {"TELEPORTED", "", "-"},
		{watcher.Deleted, "", "default/cm"}, {watcher.Bookmark, "15", ""}, {watcher.Error, "", ""}, {watcher.Modified, "16", ""}}
	for i, w := range wants {
		ev, err := d.Next()
		var skip *watcher.SkipError
		switch {
		case w.skipKey != "":
			if !errors.As(err, &skip) || (w.skipKey != "-" && skip.Key != w.skipKey) || (w.skipKey == "-" && skip.Key != "") {
				t.Fatalf("frame %d: got %+v, %v; want a skip of %q", i, ev, err, w.skipKey)
			}
		case err != nil:
			t.Fatalf("frame %d: %v", i, err)
		case ev.Type != w.typ || ev.RV != w.rv:
			t.Fatalf("frame %d: got %s at %q, want %s at %q", i, ev.Type, ev.RV, w.typ, w.rv)
		}
		switch {
		case ev.Type == watcher.Bookmark && !ev.InitialEventsEnd:
			t.Errorf("frame %d: the bookmark lost its initial-events-end annotation", i)
		case ev.Type == watcher.Error && !strings.Contains(ev.Err.Error(), "too old"):
			t.Errorf("frame %d: ERROR event decoded as %v", i, ev.Err)
		case ev.Type == watcher.Added:
			if ev.Object.Spec.Message != "hello 10" || ev.Object.Labels["app"] != "x" || ev.Object.UID != "uid-a" {
				t.Errorf("frame %d: object decoded as %+v", i, ev.Object)
			}
			if at, _ := watcher.WrittenAt(ev.Object); !at.Equal(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) {
				t.Errorf("frame %d: WrittenAt %v", i, at)
			}
		}
	}
	if _, err := d.Next(); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}

	// A frame cut short, and a frame announcing more than the bound.
	whole := cborEvent(t, watcher.Added, sample("a", "10"))
	if _, err := newCBOREventDecoder[*v1alpha1.MyResource](bytes.NewReader(whole[:len(whole)-3]), codec.GVK, 0).Next(); err != io.ErrUnexpectedEOF {
		t.Errorf("a cut frame: %v, want io.ErrUnexpectedEOF", err)
	}
	huge := cborEvent(t, watcher.Added, map[string]any{"metadata": map[string]any{"name": strings.Repeat("x", 64<<10)}})
	if _, err := newCBOREventDecoder[*v1alpha1.MyResource](bytes.NewReader(huge), codec.GVK, 16<<10).Next(); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("a frame over the bound: %v, want ErrFrameTooLarge", err)
	}
	// Not CBOR at all (a reserved head byte): the stream is broken.
	if _, err := newCBOREventDecoder[*v1alpha1.MyResource](bytes.NewReader([]byte{0xd9, 0xd9, 0xf7, 0x1c}), codec.GVK, 0).Next(); err == nil || errors.As(err, new(*watcher.SkipError)) {
		t.Errorf("malformed CBOR: %v, want a broken stream", err)
	}
}

// A CBOR LIST page: its items, a bad one skipped with its key, its metadata.
func TestCBORListSkipsBadItemsAndKeepsTheirKeys(t *testing.T) {
	page := cborOf(t, map[string]any{"apiVersion": "example.com/v1alpha1", "kind": "MyResourceList",
		"metadata": map[string]any{"resourceVersion": "20", "continue": "next"},
		"items": []any{sample("a", "3"), map[string]any{"apiVersion": "example.com/v1alpha1", "kind": "MyResource",
			"metadata": map[string]any{"name": "bad", "namespace": "default", "resourceVersion": "4", "uid": "uid-bad"}, "spec": []any{}}, sample("b", "5")}})
	var got, bad []string
	meta, err := decodeCBORList(bytes.NewReader(page), codec.GVK,
		func(o *v1alpha1.MyResource) { got = append(got, store.KeyOf(o)+"@"+o.ResourceVersion) },
		func(s *watcher.SkipError) { bad = append(bad, s.Key+"@"+s.RV+"/"+string(s.UID)) })
	if err != nil {
		t.Fatal(err)
	}
	// The skipped item's UID too: a relist tells by it whether the key
	// still holds the stored object (store.Replacement.Keep).
	if strings.Join(got, " ") != "default/a@3 default/b@5" || strings.Join(bad, " ") != "default/bad@4/uid-bad" {
		t.Errorf("items %v, skipped %v", got, bad)
	}
	if meta.ResourceVersion != "20" || meta.Continue != "next" {
		t.Errorf("list metadata %+v", meta)
	}
	if _, err := decodeCBORList(bytes.NewReader(cborOf(t, []any{1})), codec.GVK, func(*v1alpha1.MyResource) {}, func(*watcher.SkipError) {}); err == nil {
		t.Error("an array decoded as a list")
	}
}

// A server without CBOR: one that refuses it (406) and one that answers
// JSON anyway. Either way the watcher syncs and follows events with JSON,
// asks for CBOR no more, and says so once. A source that cannot ask for
// CBOR gets JSON from the start (NewCBOR says so to its caller).
func TestCBORFallsBackToJSONOnce(t *testing.T) {
	listJSON := `{"kind":"MyResourceList","apiVersion":"example.com/v1alpha1","metadata":{"resourceVersion":"7"},"items":[` +
		`{"apiVersion":"example.com/v1alpha1","kind":"MyResource","metadata":{"name":"a","namespace":"default","resourceVersion":"5","uid":"u"},"spec":{"message":"m"}}]}`
	watchJSON := `{"type":"MODIFIED","object":{"apiVersion":"example.com/v1alpha1","kind":"MyResource","metadata":{"name":"a","namespace":"default","resourceVersion":"8","uid":"u"},"spec":{"message":"m2"}}}` + "\n"
	for _, tc := range []struct {
		name           string
		refuse, opaque bool // answer 406; the source is no AcceptSource
	}{{"406", true, false}, {"JSON anyway", false, false}, {"source cannot ask", false, true}} {
		refuse := tc.refuse
		t.Run(tc.name, func(t *testing.T) {
			var cborAsked, requests atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				if strings.Contains(r.Header.Get("Accept"), "cbor") {
					cborAsked.Add(1)
					if refuse {
						w.Header().Set("Content-Type", "application/json")
						w.WriteHeader(http.StatusNotAcceptable)
						w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotAcceptable","code":406}`))
						return
					}
				}
				w.Header().Set("Content-Type", "application/json")
				if r.URL.Query().Get("watch") == "" {
					w.Write([]byte(listJSON))
					return
				}
				w.Write([]byte(watchJSON))
				w.(http.Flusher).Flush()
				<-r.Context().Done()
			}))
			defer srv.Close()
			c, err := client.New(&rest.Config{Host: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			var lines atomic.Int64
			var logged strings.Builder
			logger := funcr.New(func(prefix, args string) {
				if strings.Contains(args, "CBOR") {
					lines.Add(1)
					logged.WriteString(args)
				}
			}, funcr.Options{})
			s := store.New[*v1alpha1.MyResource]()
			var src watcher.Source = watcher.RESTSource{Client: c.REST(), Resource: v1alpha1.Resource, Namespace: "default"}
			if tc.opaque {
				src = struct{ watcher.Source }{src}
			}
			src, cdc, ok := NewCBOR(src, codec.GVK, watcher.Codec[*v1alpha1.MyResource](codec))
			if ok == tc.opaque {
				t.Fatalf("NewCBOR of a source that can ask %v: ok %v", !tc.opaque, ok)
			}
			w := watcher.New(src, s,
				watcher.Options[*v1alpha1.MyResource]{Codec: cdc, PageSize: 1})
			ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
			done := make(chan struct{})
			go func() { w.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()
			for deadline := time.Now().Add(30 * time.Second); w.ResourceVersion() != "8"; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("not at resourceVersion 8 after 30 s: at %q", w.ResourceVersion())
				}
			}
			if o, _ := s.Get("default/a"); o.Spec.Message != "m2" {
				t.Errorf("store holds %+v", o)
			}
			if n, want := cborAsked.Load(), map[bool]int64{false: 1, true: 0}[tc.opaque]; n != want {
				t.Errorf("CBOR asked for %d times (of %d requests), want %d", n, requests.Load(), want)
			}
			if n, want := lines.Load(), map[bool]int64{false: 1, true: 0}[tc.opaque]; n != want {
				t.Errorf("%d log lines about the fallback, want %d", n, want)
			}
			t.Logf("%d requests; logged: %s", requests.Load(), logged.String())
		})
	}
}

// asServerCBOR re-encodes one JSON document as kube-apiserver would send it
// over CBOR: decoded as an unstructured object (integers stay integers),
// then apimachinery's CBOR encoding behind the self-described tag.
func asServerCBOR(t testing.TB, doc []byte) []byte {
	t.Helper()
	var u map[string]any
	if err := utiljson.Unmarshal(doc, &u); err != nil {
		t.Fatal(err)
	}
	return cborOf(t, u)
}

// asServerCBOREvents re-encodes the capture name's WATCH events as
// kube-apiserver would send them over CBOR, one frame each.
func asServerCBOREvents(t testing.TB, name string) [][]byte {
	t.Helper()
	var out [][]byte
	for _, frame := range wire.Frames(wire.MustRead(t, name)) {
		var ev struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := json.Unmarshal(frame, &ev); err != nil {
			t.Fatal(err)
		}
		out = append(out, cborEvent(t, ev.Type, asServerCBOR(t, ev.Object)))
	}
	return out
}

// The JSON decoder is the oracle: kube-apiserver's recorded answers
// (testdata/wire), re-encoded as its CBOR serializer encodes unstructured
// objects, decode over CBOR to the same list items, list metadata and
// events (types, resourceVersions, the initial-events-end mark, ERROR
// statuses) and the same objects, managedFields aside (the JSON path keeps
// only their newest time, which WrittenAt reads: that must agree too).
func TestCBORDecodesTheCapturesAsJSONDoes(t *testing.T) {
	same := func(what string, j, c *v1alpha1.MyResource) {
		t.Helper()
		jt, _ := watcher.WrittenAt(j)
		ct, _ := watcher.WrittenAt(c)
		if !jt.Equal(ct) {
			t.Errorf("%s: WrittenAt JSON %v, CBOR %v", what, jt, ct)
		}
		j, c = j.DeepCopy(), c.DeepCopy()
		j.ManagedFields, c.ManagedFields = nil, nil
		if !equality.Semantic.DeepEqual(j, c) {
			t.Errorf("%s: JSON decodes to %+v, CBOR to %+v", what, j, c)
		}
	}
	for _, page := range []string{wire.ListPage1, wire.ListPage2} {
		data := wire.MustRead(t, page)
		var jsonItems, cborItems []*v1alpha1.MyResource
		jm, err := decodeList(bytes.NewReader(data), codec, func(o *v1alpha1.MyResource) { jsonItems = append(jsonItems, o) }, func(*watcher.SkipError) {})
		if err != nil {
			t.Fatal(err)
		}
		cm, err := decodeCBORList(bytes.NewReader(asServerCBOR(t, data)), codec.GVK, func(o *v1alpha1.MyResource) { cborItems = append(cborItems, o) },
			func(s *watcher.SkipError) { t.Errorf("%s: %v", page, s) })
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(jm, cm) || len(jsonItems) != len(cborItems) || len(jsonItems) == 0 {
			t.Fatalf("%s: JSON %+v with %d items, CBOR %+v with %d", page, jm, len(jsonItems), cm, len(cborItems))
		}
		for i := range jsonItems {
			same(page, jsonItems[i], cborItems[i])
		}
	}
	for _, stream := range []string{wire.WatchList, wire.WatchGone} {
		cborStream := bytes.NewReader(bytes.Join(asServerCBOREvents(t, stream), nil))
		jsonEvents := decodeAll(t, wire.MustRead(t, stream))
		d := newCBOREventDecoder[*v1alpha1.MyResource](cborStream, codec.GVK, 0)
		for i, j := range jsonEvents {
			c, err := d.Next()
			if err != nil {
				t.Fatalf("%s frame %d: %v", stream, i, err)
			}
			what := fmt.Sprintf("%s frame %d", stream, i)
			if c.Type != j.Type || c.RV != j.RV || c.InitialEventsEnd != j.InitialEventsEnd || fmt.Sprint(c.Err) != fmt.Sprint(j.Err) {
				t.Errorf("%s: JSON %s at %q (end %v, err %v), CBOR %s at %q (end %v, err %v)", what,
					j.Type, j.RV, j.InitialEventsEnd, j.Err, c.Type, c.RV, c.InitialEventsEnd, c.Err)
			}
			if j.Object != nil {
				same(what, j.Object, c.Object)
			}
		}
		if _, err := d.Next(); err != io.EOF {
			t.Errorf("%s: after the last frame %v", stream, err)
		}
	}
}

// countingReader counts the bytes read from r.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// A CBOR LIST page is read within the frame bound, as a JSON page is (item
// by item): at most DefaultMaxFrame read before the first item is handed on.
// Open (the page is read whole, then copied item by item): skipped until fixed.
func TestACBORListPageIsReadWithinTheFrameBound(t *testing.T) {
	openfinding.Skip(t)
	if testing.Short() {
		t.Skip("builds pages of 24 MiB")
	}
	items := make([]any, 24<<10)
	for i := range items {
		o := sample(fmt.Sprintf("o-%d", i), "3")
		o.Spec.Message = strings.Repeat("m", 700)
		items[i] = o
	}
	list := map[string]any{"apiVersion": "example.com/v1alpha1", "kind": "MyResourceList",
		"metadata": map[string]any{"resourceVersion": "20"}, "items": items}
	cborPage := cborOf(t, list)
	jsonPage, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	items = nil
	firstAdd := func(decode func(r io.Reader, add func(*v1alpha1.MyResource)) error, page []byte) (read int, grown uint64) {
		cr := &countingReader{r: bytes.NewReader(page)}
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		base := ms.HeapAlloc
		read = -1
		err := decode(cr, func(*v1alpha1.MyResource) {
			if read < 0 {
				read = cr.n
				runtime.ReadMemStats(&ms)
				grown = ms.HeapAlloc - min(base, ms.HeapAlloc)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		return read, grown
	}
	cborRead, cborGrown := firstAdd(func(r io.Reader, add func(*v1alpha1.MyResource)) error {
		_, err := decodeCBORList(r, codec.GVK, add, func(*watcher.SkipError) {})
		return err
	}, cborPage)
	jsonRead, _ := firstAdd(func(r io.Reader, add func(*v1alpha1.MyResource)) error {
		_, err := decodeList(r, codec, add, func(*watcher.SkipError) {})
		return err
	}, jsonPage)
	const mib = 1 << 20
	if cborRead > DefaultMaxFrame {
		t.Errorf("a CBOR LIST page of %.1f MiB (%d items): %.1f MiB read before the first item was handed on (JSON: %d KiB of its %.1f MiB page), heap grown by %.1f MiB by then; want at most DefaultMaxFrame (%d MiB) read",
			float64(len(cborPage))/mib, len(list["items"].([]any)), float64(cborRead)/mib, jsonRead>>10, float64(len(jsonPage))/mib, float64(cborGrown)/mib, DefaultMaxFrame/mib)
	}
}
