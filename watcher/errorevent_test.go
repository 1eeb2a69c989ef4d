package watcher

import (
	"bytes"
	"testing"

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

// Whether an ERROR's object is a Status, and which, is the dynamic
// client's to say: codec's TestAnErrorIsTheStatusTheDynamicClientFinds holds
// both codecs to a real one.

// decodeOne decodes a stream of one frame, an event.
func decodeOne(t *testing.T, frame string) Event[*v1alpha1.MyResource] {
	t.Helper()
	ev, err := codec.DecodeEvents(bytes.NewReader([]byte(frame))).Next()
	if err != nil {
		t.Fatalf("%s: %v", frame, err)
	}
	return ev
}
