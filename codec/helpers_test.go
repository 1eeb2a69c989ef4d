package codec

import (
	"bytes"
	"errors"
	"io"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/api/v1alpha1"
	"rawwatch/store"
	"rawwatch/watcher"
)

// codec is the fast JSON codec of MyResource, as the controller runs it.
var codec = JSON[*v1alpha1.MyResource]{GVK: v1alpha1.GroupVersionKind}

// plainCodec is the watcher's own codec, client-go's way.
var plainCodec = watcher.JSONCodec[*v1alpha1.MyResource]{GVK: v1alpha1.GroupVersionKind}

// decodeList reads a LIST page with c.
func decodeList[T watcher.Object](r io.Reader, c watcher.Codec[T], add func(T), bad func(*watcher.SkipError)) (metav1.ListMeta, error) {
	return c.DecodeList(r, add, bad)
}

// sharing is codec for objects given to st (labels shared as it shares them).
func sharing(st *store.Store[*v1alpha1.MyResource]) JSON[*v1alpha1.MyResource] {
	c := codec
	c.SharesLabels = st.SharesLabels
	return c
}

// apply writes an event's object to st, as the watcher does.
func apply(st *store.Store[*v1alpha1.MyResource], e watcher.Event[*v1alpha1.MyResource]) {
	if e.Type == watcher.Deleted {
		st.Delete(e.Object)
		return
	}
	st.Upsert(e.Object)
}

// decodeAll decodes a whole stream that has no bad frame.
func decodeAll(t *testing.T, stream []byte) []watcher.Event[*v1alpha1.MyResource] {
	t.Helper()
	dec := newEventDecoder(bytes.NewReader(stream), codec)
	var evs []watcher.Event[*v1alpha1.MyResource]
	for {
		ev, err := dec.Next()
		if errors.Is(err, io.EOF) {
			return evs
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type != watcher.Error && ev.RV == "" {
			t.Errorf("%s event without resourceVersion", ev.Type)
		}
		evs = append(evs, ev)
	}
}

// framedEvent is a watch frame of typ carrying object.
func framedEvent(typ, object string) string {
	return `{"type":"` + typ + `","object":` + object + `}` + "\n"
}
