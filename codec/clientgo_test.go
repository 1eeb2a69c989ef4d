package codec

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	restclientwatch "k8s.io/client-go/rest/watch"

	"rawwatch/api/v1alpha1"
	"rawwatch/watcher"
)

// Streams read by client-go itself, not by a model of it: a typed client's
// watch decoder (rest.Request.newStreamWatcher's: the negotiated JSON
// framer and stream serializer for the envelope, the scheme's serializer
// for the object), against both codecs.

// clientGoFirst is the first event client-go's watch decoder reads of data,
// or its error.
func clientGoFirst(t *testing.T, data string) (watch.EventType, runtime.Object, error) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	n := runtime.NewClientNegotiator(serializer.NewCodecFactory(scheme).WithoutConversion(), v1alpha1.SchemeGroupVersion)
	objects, events, framer, err := n.StreamDecoder("application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	body := io.NopCloser(bytes.NewReader([]byte(data)))
	return restclientwatch.NewDecoder(streaming.NewDecoder(framer.NewFrameReader(body), events), objects).Decode()
}

// codecsFirst is the first event each codec reads of data, and its error.
func codecsFirst(data string) map[string]struct {
	ev  watcher.Event[*v1alpha1.MyResource]
	err error
} {
	out := map[string]struct {
		ev  watcher.Event[*v1alpha1.MyResource]
		err error
	}{}
	for name, c := range map[string]watcher.Codec[*v1alpha1.MyResource]{"codec.JSON": codec, "watcher.JSONCodec": plainCodec} {
		ev, err := c.DecodeEvents(bytes.NewReader([]byte(data))).Next()
		out[name] = struct {
			ev  watcher.Event[*v1alpha1.MyResource]
			err error
		}{ev, err}
	}
	return out
}

// dynamicFirst is the first event client-go's dynamic client reads of a
// watch stream carrying data (served by a test server), and the error
// apierrors.FromObject makes of it (what a Reflector makes of an ERROR); a
// frame the client cannot decode is decodeErr.
func dynamicFirst(t *testing.T, data string) (typ watch.EventType, asError error, decodeErr error) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, data)
	}))
	defer srv.Close()
	client, err := dynamic.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	w, err := client.Resource(v1alpha1.GroupVersionResource).Namespace("ns").Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ev, ok := <-w.ResultChan()
	if !ok {
		t.Fatalf("the dynamic client read no event of %q", data)
	}
	if ev.Type == watch.Error {
		asError = apierrors.FromObject(ev.Object)
		if strings.Contains(asError.Error(), "unable to decode an event from the watch stream") {
			return ev.Type, nil, asError
		}
	}
	return ev.Type, asError, nil
}

// A watch frame's envelope is a metav1.WatchEvent as client-go's stream
// serializer reads it: an apiVersion or kind in it (any case, as the
// serializer finds them) must, defaulted, name a WatchEvent the client's
// scheme knows: example.com/v1alpha1's for the typed client (the
// controller's client.Scheme), v1's for the dynamic one. The codecs take
// only an envelope both take (apiVersion and kind absent, or kind
// WatchEvent), and skip any other frame as they skip a frame of the wrong
// shape.
func TestAnEnvelopeNamingAnotherKindIsRefusedAsClientGoRefusesIt(t *testing.T) {
	object := `{"apiVersion":"example.com/v1alpha1","kind":"MyResource","metadata":{"name":"a","namespace":"ns","uid":"u-a","resourceVersion":"5"}}`
	for name, members := range map[string]string{
		"none":                           ``,
		"kind WatchEvent":                `"kind":"WatchEvent",`,
		"KIND WatchEvent":                `"KIND":"WatchEvent",`,
		"kind Pod":                       `"kind":"Pod",`,
		"KIND Pod":                       `"KIND":"Pod",`,
		"Kelvin-sign kind Pod":           `"` + "\u212a" + `ind":"Pod",`,
		"kind Pod, then kind":            `"kind":"Pod","kind":"WatchEvent",`,
		"kind, then KIND Pod":            `"kind":"WatchEvent","KIND":"Pod",`,
		"an empty kind":                  `"kind":"",`,
		"apiVersion v1":                  `"apiVersion":"v1",`,
		"apiVersion of the objects":      `"apiVersion":"example.com/v1alpha1",`,
		"APIVERSION of the objects":      `"APIVERSION":"example.com/v1alpha1",`,
		"apiVersion a group, no version": `"apiVersion":"example.com/",`,
		"an empty apiVersion":            `"apiVersion":"",`,
		"apiVersion /":                   `"apiVersion":"/",`,
		"apiVersion not one":             `"apiVersion":"a/b/c",`,
		"apiVersion a number":            `"apiVersion":5,`,
		"kind Status":                    `"kind":"Status","apiVersion":"v1",`,
	} {
		frame := `{` + members + `"type":"ADDED","object":` + object + `}` + "\n"
		_, _, typedErr := clientGoFirst(t, frame)
		_, _, dynamicErr := dynamicFirst(t, frame)
		refused := typedErr != nil || dynamicErr != nil
		for codec, got := range codecsFirst(frame) {
			switch {
			case refused && got.err == nil:
				t.Errorf("an envelope with %s: %s applies %s %s/%s; client-go fails the frame (typed: %v; dynamic: %v)",
					name, codec, got.ev.Type, got.ev.Object.Namespace, got.ev.Object.Name, typedErr, dynamicErr)
			case !refused && (got.err != nil || got.ev.Object == nil || got.ev.Object.Name != "a"):
				t.Errorf("an envelope with %s: %s: %v; both client-go clients read the event", name, codec, got.err)
			case got.err != nil && !errors.As(got.err, new(*watcher.SkipError)):
				t.Errorf("an envelope with %s: %s breaks the stream (%v); a frame of the wrong shape is skipped", name, codec, got.err)
			}
		}
	}
}

// An ERROR's object is a Status as client-go finds it: its apiVersion and
// kind as the serializer finds them (any case), v1 Status decoded as a
// metav1.Status, any other object as the dynamic client decodes it
// (unstructured, then apierrors.FromObject). {"KIND":"Status",...,"code":410}
// is a 410 Expired to the typed client and the dynamic one alike.
func TestAnErrorStatusIsFoundAsClientGoFindsIt(t *testing.T) {
	frame := `{"type":"ERROR","object":{"KIND":"Status","apiVersion":"v1","status":"Failure","code":410,"reason":"Expired","message":"too old"}}` + "\n"
	typ, obj, err := clientGoFirst(t, frame)
	if err != nil || typ != watch.Error || !apierrors.IsResourceExpired(apierrors.FromObject(obj)) {
		t.Fatalf("client-go: %s %T %v; want an ERROR carrying a 410 Expired Status", typ, obj, err)
	}
	for codec, got := range codecsFirst(frame) {
		if class, _ := watcher.Classify(got.ev.Err); got.err != nil || class != watcher.Expired {
			t.Errorf("%s: %s (class %v), error %v; client-go finds a 410 Expired", codec, got.ev.Err, class, got.err)
		}
	}
}

// Every ERROR object is, to both codecs, the error the dynamic client's
// Reflector makes of it (apierrors.FromObject of what it decodes): the same
// Status, or no Status (an error of its own: transient, whatever it says).
func TestAnErrorIsTheStatusTheDynamicClientFinds(t *testing.T) {
	for name, object := range map[string]string{
		"the usual":                          `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"gone","reason":"Expired","code":410}`,
		"meta.k8s.io/v1":                     `{"kind":"Status","apiVersion":"meta.k8s.io/v1","status":"Failure","reason":"Expired","code":410}`,
		"another apiVersion":                 `{"kind":"Status","apiVersion":"v2","status":"Failure","reason":"Expired","code":410}`,
		"no apiVersion":                      `{"kind":"Status","status":"Failure","reason":"Expired","code":410}`,
		"Kind in another case":               `{"Kind":"Status","apiVersion":"v1","reason":"Expired","code":410}`,
		"APIVERSION in another case":         `{"kind":"Status","APIVERSION":"v1","reason":"Expired","code":410}`,
		"kind, then KIND Pod":                `{"kind":"Status","apiVersion":"v1","KIND":"Pod","reason":"Expired","code":410}`,
		"kind, then KIND WatchEvent":         `{"kind":"Status","apiVersion":"v1","KIND":"WatchEvent","reason":"Expired","code":410}`,
		"an empty APIVERSION after":          `{"kind":"Status","apiVersion":"v1","APIVERSION":"","reason":"Expired","code":410}`,
		"meta.k8s.io/v1, KIND Pod":           `{"kind":"Status","apiVersion":"meta.k8s.io/v1","KIND":"Pod","reason":"Expired","code":410}`,
		"Code in another case":               `{"kind":"Status","apiVersion":"v1","reason":"Expired","Code":410}`,
		"a code that is a word":              `{"kind":"Status","apiVersion":"v1","reason":"Expired","code":"410"}`,
		"a code that is a word, meta.k8s.io": `{"kind":"Status","apiVersion":"meta.k8s.io/v1","reason":"Expired","code":"410"}`,
		"another kind":                       `{"kind":"MyResource","apiVersion":"v1","reason":"Expired","code":410}`,
		"a kind that is a number":            `{"kind":5,"apiVersion":"v1","reason":"Expired","code":410}`,
		"apiVersion not one":                 `{"kind":"Status","apiVersion":"a/b/c","reason":"Expired","code":410}`,
	} {
		t.Run(name, func(t *testing.T) {
			frame := `{"type":"ERROR","object":` + object + `}` + "\n"
			_, want, decodeErr := dynamicFirst(t, frame)
			var ws *apierrors.StatusError
			wantStatus := decodeErr == nil && errors.As(want, &ws)
			for codec, got := range codecsFirst(frame) {
				var gs *apierrors.StatusError
				gotStatus := errors.As(got.ev.Err, &gs)
				if got.err != nil || gotStatus != wantStatus || gotStatus && !reflect.DeepEqual(gs.ErrStatus, ws.ErrStatus) {
					t.Errorf("%s: %#v (%v); the dynamic client: %#v (decoding: %v)", codec, got.ev.Err, got.err, want, decodeErr)
				}
				if class, _ := watcher.Classify(got.ev.Err); !gotStatus && class != watcher.Transient {
					t.Errorf("%s: no Status, class %s; want transient", codec, class)
				}
			}
		})
	}
}
