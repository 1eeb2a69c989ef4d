package watcher

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"rawwatch/api/v1alpha1"
)

// An ERROR event carries the server's error as a Status; client-go takes
// it with apierrors.FromObject on the decoded object. Anything else in an
// ERROR is an unexpected object: an error of its own, retried, whatever
// words it holds.

// An ERROR whose object is not a Status is a transient error: its text does
// not make it a 410, a too-large resourceVersion or a starting server.
func TestAnErrorEventOfAnotherKindIsTransient(t *testing.T) {
	for _, message := range []string{"too old resource version", "Too large resource version", "storage is (re)initializing"} {
		obj := item("a", `,"uid":"u-a","resourceVersion":"6"`, `,"spec":{"message":"`+message+`"}`)
		ev := decodeOne(t, framed(Error, obj))
		if class, _ := Classify(ev.Err); class != Transient || serverStarting(ev.Err) {
			t.Errorf("an ERROR carrying a MyResource that says %q: class %s, server starting %v; want transient (%v)",
				message, class, serverStarting(ev.Err), ev.Err)
		}
	}
}

// Whether an ERROR's object is a Status, and what it says, is what
// apierrors.FromObject makes of it, decoded as client-go's dynamic client
// decodes it (unstructured.UnstructuredJSONScheme).
func TestAnErrorIsAStatusAsFromObjectSays(t *testing.T) {
	for name, object := range map[string]string{
		"the usual":             `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"gone","reason":"Expired","code":410}`,
		"meta.k8s.io/v1":        `{"kind":"Status","apiVersion":"meta.k8s.io/v1","status":"Failure","reason":"Expired","code":410}`,
		"another apiVersion":    `{"kind":"Status","apiVersion":"v2","status":"Failure","reason":"Expired","code":410}`,
		"no apiVersion":         `{"kind":"Status","status":"Failure","reason":"Expired","code":410}`,
		"Kind in another case":  `{"Kind":"Status","apiVersion":"v1","reason":"Expired","code":410}`,
		"a code that is a word": `{"kind":"Status","apiVersion":"v1","reason":"Expired","code":"410"}`,
		"another kind":          `{"kind":"MyResource","apiVersion":"v1","reason":"Expired","code":410}`,
	} {
		t.Run(name, func(t *testing.T) {
			var want error
			if obj, err := runtime.Decode(unstructured.UnstructuredJSONScheme, []byte(object)); err != nil {
				want = err
			} else {
				want = apierrors.FromObject(obj)
			}
			got := decodeOne(t, framed(Error, object)).Err
			var gs, ws *apierrors.StatusError
			gotStatus, wantStatus := errors.As(got, &gs), errors.As(want, &ws)
			if gotStatus != wantStatus || gotStatus && !reflect.DeepEqual(gs.ErrStatus, ws.ErrStatus) {
				t.Errorf("ERROR %s: the watcher's error %#v, FromObject's %#v", object, got, want)
			}
			if class, _ := Classify(got); !wantStatus && class != Transient {
				t.Errorf("ERROR %s, no Status: class %s, want transient", object, class)
			}
		})
	}
}

// decodeOne decodes a stream of one frame, an event.
func decodeOne(t *testing.T, frame string) Event[*v1alpha1.MyResource] {
	t.Helper()
	ev, err := codec.DecodeEvents(bytes.NewReader([]byte(frame))).Next()
	if err != nil {
		t.Fatalf("%s: %v", frame, err)
	}
	return ev
}
