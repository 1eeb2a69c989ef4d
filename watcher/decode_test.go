package watcher

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/api/v1alpha1"
	"rawwatch/wire"
)

var codec = JSONCodec[*v1alpha1.MyResource]{GVK: v1alpha1.GroupVersionKind}

func fixture(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.Open("testdata/fixtures/" + name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// The two pages of a LIST ?limit=2 of the three samples, as kube-apiserver
// sent them: in key order, the first with a continue token and the count
// of the rest, both at the same resourceVersion (one snapshot).
func TestDecodeListPages(t *testing.T) {
	var got []*v1alpha1.MyResource
	var metas []metav1.ListMeta
	for _, page := range []string{wire.ListPage1, wire.ListPage2} {
		meta, err := codec.DecodeList(bytes.NewReader(wire.MustRead(t, page)),
			func(o *v1alpha1.MyResource) { got = append(got, o) },
			func(s *SkipError) { t.Errorf("unexpected skip: %v", s) })
		if err != nil {
			t.Fatalf("%s: %v", page, err)
		}
		metas = append(metas, meta)
	}
	var names []string
	for _, o := range got {
		names = append(names, o.Namespace+"/"+o.Name)
		if o.Spec.Message == "" || o.ResourceVersion == "" || o.UID == "" || len(o.ManagedFields) == 0 {
			t.Errorf("item not fully decoded: %+v", o)
		}
	}
	if strings.Join(names, ",") != "default/broken,default/greeting,default/hello" {
		t.Fatalf("items = %v", names)
	}
	if got[2].Spec.Message != "hello, world" {
		t.Errorf("hello's message = %q", got[2].Spec.Message)
	}
	if m := metas[0]; m.Continue == "" || m.ResourceVersion == "" || m.RemainingItemCount == nil || *m.RemainingItemCount != 1 {
		t.Errorf("first page's metadata = %+v", m)
	}
	if m := metas[1]; m.Continue != "" || m.ResourceVersion != metas[0].ResourceVersion {
		t.Errorf("last page's metadata = %+v; want no continue, resourceVersion %s", m, metas[0].ResourceVersion)
	}
}

func TestDecodeListSkipsBadItemsAndKeepsTheirKeys(t *testing.T) {
	body := `{"kind":"MyResourceList","apiVersion":"example.com/v1alpha1","metadata":{"resourceVersion":"7"},"items":[
	  {"apiVersion":"example.com/v1alpha1","kind":"MyResource","metadata":{"name":"ok","namespace":"ns","resourceVersion":"5"},"spec":{"message":"hi"}},
	  {"apiVersion":"example.com/v1alpha1","kind":"MyResource","metadata":{"name":"broken","namespace":"ns","resourceVersion":"6"},"spec":{"message":17}},
	  null]}`
	var ok []string
	var skipped []*SkipError
	meta, err := codec.DecodeList(strings.NewReader(body),
		func(o *v1alpha1.MyResource) { ok = append(ok, o.Name) },
		func(s *SkipError) { skipped = append(skipped, s) })
	if err != nil {
		t.Fatal(err)
	}
	if meta.ResourceVersion != "7" || len(ok) != 1 || ok[0] != "ok" {
		t.Fatalf("meta %+v, ok %v", meta, ok)
	}
	if len(skipped) != 2 || skipped[0].Key != "ns/broken" || skipped[0].RV != "6" || skipped[1].Key != "" {
		t.Fatalf("skipped = %v", skipped)
	}
}

func TestDecodeListRejectsNonLists(t *testing.T) {
	for _, body := range []string{``, `[]`, `{}`, `{"items":`, `{"items":{}}`, `not json`} {
		if _, err := codec.DecodeList(strings.NewReader(body), func(*v1alpha1.MyResource) {}, func(*SkipError) {}); err == nil {
			t.Errorf("decodeList(%q) succeeded", body)
		}
	}
}

// decodeAll decodes a whole stream that has no bad frame.
func decodeAll(t *testing.T, stream []byte) []Event[*v1alpha1.MyResource] {
	t.Helper()
	dec := codec.DecodeEvents(bytes.NewReader(stream))
	var evs []Event[*v1alpha1.MyResource]
	for {
		ev, err := dec.Next()
		if errors.Is(err, io.EOF) {
			return evs
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type != Error && ev.RV == "" {
			t.Errorf("%s event without resourceVersion", ev.Type)
		}
		evs = append(evs, ev)
	}
}

// A WatchList stream as kube-apiserver sent it: the initial events, the
// bookmark that ends them, the changes made while it was open, with
// bookmarks where the server's watch cache put them (the last 2 s before the
// timeout); resourceVersions only grow after the initial events.
func TestDecodeWatchListStream(t *testing.T) {
	var got []string
	var last int64
	bookmarks := 0
	evs := decodeAll(t, wire.MustRead(t, wire.WatchList))
	for i, ev := range evs {
		rv := mustRV(t, ev.RV)
		if i >= 3 && rv < last {
			t.Errorf("frame %d (%s): resourceVersion %d after %d", i, ev.Type, rv, last)
		}
		last = max(last, rv)
		switch {
		case ev.Type == Bookmark && !ev.InitialEventsEnd:
			bookmarks++
		case ev.Type == Bookmark:
			got = append(got, "BOOKMARK (initial events end)")
		default:
			got = append(got, ev.Type+" "+ev.Object.Name)
		}
	}
	want := "ADDED broken,ADDED greeting,ADDED hello,BOOKMARK (initial events end),MODIFIED hello,ADDED extra,DELETED broken"
	if strings.Join(got, ",") != want {
		t.Fatalf("events (bookmarks but the initial-events-end one left out):\n%s\nwant\n%s", strings.Join(got, ","), want)
	}
	if bookmarks == 0 || evs[len(evs)-1].Type != Bookmark {
		t.Errorf("%d bookmarks after the initial events, the last frame %s; want the stream to end with one", bookmarks, evs[len(evs)-1].Type)
	}
}

// A WATCH from a resourceVersion long gone: one ERROR event, a 410.
func TestDecodeGoneStream(t *testing.T) {
	evs := decodeAll(t, wire.MustRead(t, wire.WatchGone))
	if len(evs) != 1 || evs[0].Type != Error || !apierrors.IsResourceExpired(evs[0].Err) {
		t.Fatalf("events = %+v; want one ERROR, a 410 Expired status", evs)
	}
}

// A stream with bad frames: each bad frame is skipped on its own, the stream
// goes on, and a frame cut in half ends it with an error.
func TestDecodeWatchStreamSkipsBadFrames(t *testing.T) {
	dec := codec.DecodeEvents(fixture(t, "watch-stream-bad.jsonl"))
	type result struct {
		typ, key string
		skip     bool
	}
	var got []result
	var final error
	for {
		ev, err := dec.Next()
		var skip *SkipError
		if errors.As(err, &skip) {
			got = append(got, result{ev.Type, skip.Key, true})
			continue
		}
		if err != nil {
			final = err
			break
		}
		got = append(got, result{ev.Type, ev.RV, false})
	}
	want := []result{
		{"ADDED", "", false},                // good (RV checked below)
		{"ADDED", "default/bad-spec", true}, // wrong shape
		{"ADDED", "default/a-pod", true},    // wrong kind
		{"SURPRISE", "", true},              // unknown type
		{"DELETED", "default/sample-1", true},
		{"BOOKMARK", "4242", false},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i].typ != want[i].typ || got[i].skip != want[i].skip || (want[i].key != "" && got[i].key != want[i].key) {
			t.Errorf("frame %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if final == nil || errors.Is(final, io.EOF) {
		t.Fatalf("a truncated frame must end the stream with an error, got %v", final)
	}
}

func TestWrittenAtIsTheLatestManagedFieldsTime(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	obj := &v1alpha1.MyResource{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
	if got, ok := WrittenAt(obj); !ok || !got.Equal(created) {
		t.Errorf("without managedFields: %v %v, want the creation time", got, ok)
	}
	t1, t2 := metav1.NewTime(created.Add(time.Minute)), metav1.NewTime(created.Add(time.Hour))
	obj.ManagedFields = []metav1.ManagedFieldsEntry{{Time: &t2}, {Time: &t1}, {}}
	if got, ok := WrittenAt(obj); !ok || !got.Equal(t2.Time) {
		t.Errorf("with managedFields: %v %v, want %v", got, ok, t2)
	}
	if _, ok := WrittenAt(&v1alpha1.MyResource{}); ok {
		t.Error("an object with no times has a write time")
	}
}

func mustRV(t *testing.T, rv string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", rv, err)
	}
	return n
}
