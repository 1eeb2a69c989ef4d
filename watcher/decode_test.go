package watcher

import (
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/api/v1alpha1"
)

var codec = Codec[*v1alpha1.MyResource]{GVK: v1alpha1.GroupVersionKind}

func fixture(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.Open("testdata/fixtures/" + name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// The fixtures were captured from kube-apiserver v1.37.2.
func TestDecodeListPage(t *testing.T) {
	var got []*v1alpha1.MyResource
	meta, err := decodeList(fixture(t, "list-page1.json"), codec,
		func(o *v1alpha1.MyResource) { got = append(got, o) },
		func(s *SkipError) { t.Errorf("unexpected skip: %v", s) })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "sample-1" || got[1].Name != "sample-2" {
		t.Fatalf("items = %v", got)
	}
	if got[0].Spec.Message != "hello 1" || got[0].ResourceVersion == "" || len(got[0].ManagedFields) == 0 {
		t.Errorf("item not fully decoded: %+v", got[0])
	}
	if meta.Continue == "" || meta.ResourceVersion == "" || *meta.RemainingItemCount != 1 {
		t.Errorf("list metadata = %+v", meta)
	}
}

func TestDecodeListSkipsBadItemsAndKeepsTheirKeys(t *testing.T) {
	body := `{"kind":"MyResourceList","apiVersion":"example.com/v1alpha1","metadata":{"resourceVersion":"7"},"items":[
	  {"apiVersion":"example.com/v1alpha1","kind":"MyResource","metadata":{"name":"ok","namespace":"ns","resourceVersion":"5"},"spec":{"message":"hi"}},
	  {"apiVersion":"example.com/v1alpha1","kind":"MyResource","metadata":{"name":"broken","namespace":"ns","resourceVersion":"6"},"spec":{"message":17}},
	  null]}`
	var ok []string
	var skipped []*SkipError
	meta, err := decodeList(strings.NewReader(body), codec,
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
		if _, err := decodeList(strings.NewReader(body), codec, func(*v1alpha1.MyResource) {}, func(*SkipError) {}); err == nil {
			t.Errorf("decodeList(%q) succeeded", body)
		}
	}
}

func TestDecodeWatchStream(t *testing.T) {
	dec := newEventDecoder(fixture(t, "watch-stream.jsonl"), codec)
	var types []string
	var last Event[*v1alpha1.MyResource]
	for {
		ev, err := dec.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, ev.Type)
		last = ev
		if ev.Type == Bookmark && !ev.InitialEventsEnd {
			t.Errorf("the WatchList bookmark must carry initial-events-end")
		}
		if ev.Type != Error && ev.RV == "" {
			t.Errorf("%s event without resourceVersion", ev.Type)
		}
	}
	if got := strings.Join(types, ","); got != "ADDED,ADDED,ADDED,BOOKMARK,MODIFIED,DELETED,ERROR" {
		t.Fatalf("event types = %s", got)
	}
	if !apierrors.IsResourceExpired(last.Err) {
		t.Fatalf("ERROR frame decoded as %v, want a 410 Expired status", last.Err)
	}
}

// A stream with bad frames: each bad frame is skipped on its own, the stream
// goes on, and a frame cut in half ends it with an error.
func TestDecodeWatchStreamSkipsBadFrames(t *testing.T) {
	dec := newEventDecoder(fixture(t, "watch-stream-bad.jsonl"), codec)
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
