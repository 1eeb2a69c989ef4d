package watcher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "sigs.k8s.io/json"

	"rawwatch/api/v1alpha1"
	"rawwatch/internal/kuberef"
)

// The explorer's decoding rule: the schedule's codec reads every WATCH
// stream and LIST page served under a fault that sends what an apiserver
// does not (respelled, garbled, cut or corrupted frames) as Kubernetes'
// own decoding reads the same bytes, as far as the loop read them. The
// reference is apimachinery's, apart from the watcher's code: client-go's
// JSON framer (a json.Decoder), metav1.WatchEvent and the object through
// sigs.k8s.io/json, the serializer's apiVersion and kind, an ERROR's
// Status through apierrors.FromObject. Where they may differ by design:
// Kubernetes ends a stream at a frame it cannot decode, the watcher skips
// it (with the identity its metadata gives) and reads on; and the watcher
// may break a stream at a frame Kubernetes reads across a line break (a
// cut frame) or that is a bare word, losing no event.

// decodedAsKubernetes is a Source whose bodies are decoded again once the
// loop closes them, by codec and by Kubernetes' decoding, which must agree:
// as they came when they were opened while when held, and, whatever the
// fault, each frame and page the server wrote as usual respelled
// (respell.go's spellings).
type decodedAsKubernetes struct {
	Source
	codec Codec[*v1alpha1.MyResource]
	fail  func(string, ...any)
	when  func() bool
}

func (d decodedAsKubernetes) List(ctx context.Context, opts metav1.ListOptions) (io.ReadCloser, error) {
	body, err := d.Source.List(ctx, opts)
	return d.recorded(body, err, "LIST page", pageDiffers, respelledPagesDiffer)
}

func (d decodedAsKubernetes) Watch(ctx context.Context, opts metav1.ListOptions) (io.ReadCloser, error) {
	body, err := d.Source.Watch(ctx, opts)
	return d.recorded(body, err, "WATCH stream", streamDiffers, respelledFramesDiffer)
}

// recorded wraps a body so that, closed, it is checked by differs (if the
// schedule asks it now) and by respelled.
func (d decodedAsKubernetes) recorded(body io.ReadCloser, err error, what string, differs, respelled func(Codec[*v1alpha1.MyResource], []byte) string) (io.ReadCloser, error) {
	if err != nil {
		return body, err
	}
	as := d.when()
	return &recorded{ReadCloser: body, what: what, fail: d.fail, differ: func(b []byte) string {
		if as {
			if diff := differs(d.codec, b); diff != "" {
				return diff
			}
		}
		return respelled(d.codec, b)
	}}, nil
}

// recorded keeps what is read from a body, and compares it when closed.
type recorded struct {
	io.ReadCloser
	data   []byte
	what   string
	differ func([]byte) string
	fail   func(string, ...any)
}

func (r *recorded) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.data = append(r.data, p[:n]...)
	return n, err
}

func (r *recorded) Close() error {
	if d := r.differ(r.data); d != "" {
		r.fail("the codec decodes as Kubernetes does: a %s read otherwise: %s", r.what, d)
	}
	return r.ReadCloser.Close()
}

// refFrame is one frame of a stream as Kubernetes reads it.
type refFrame struct {
	raw  []byte // as the framer split it
	kind string // "event", "skip", "end", "broken"
	ev   Event[*v1alpha1.MyResource]
	skip SkipError // a skip's identity, Err apart
}

// kubernetesFrame reads the next frame of frames as client-go does.
func kubernetesFrame(frames *json.Decoder) refFrame {
	var raw json.RawMessage
	if err := frames.Decode(&raw); err != nil {
		if err == io.EOF {
			return refFrame{kind: "end"}
		}
		return refFrame{kind: "broken"}
	}
	f := refFrame{raw: raw, kind: "skip", skip: SkipError{What: "watch frame"}}
	var we metav1.WatchEvent
	if kjson.UnmarshalCaseSensitivePreserveInts(raw, &we) != nil {
		return f
	}
	f.ev.Type = we.Type
	object := we.Object.Raw
	switch we.Type {
	case Added, Modified, Deleted:
		f.skip.What = we.Type + " event"
		if object == nil {
			return f
		}
		obj, err := kuberef.Object(object, false)
		if err != nil {
			id := kuberef.IdentityOf(object)
			f.skip.Key, f.skip.RV, f.skip.UID = id.Key, id.RV, id.UID
			return f
		}
		f.kind, f.ev.Object, f.ev.RV = "event", obj, obj.ResourceVersion
	case Bookmark:
		f.skip.What = "BOOKMARK"
		var tm struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if kjson.UnmarshalCaseSensitivePreserveInts(object, &tm) != nil || tm.Metadata.ResourceVersion == "" {
			return f
		}
		f.kind, f.ev.RV, f.ev.InitialEventsEnd = "event", tm.Metadata.ResourceVersion, tm.Metadata.Annotations[metav1.InitialEventsAnnotationKey] == "true"
	case Error:
		obj, err := runtime.Decode(kuberef.DynamicObjects, object)
		if err == nil {
			err = apierrors.FromObject(obj)
		}
		f.kind, f.ev.Err = "event", err
	}
	return f
}

// streamDiffers decodes a WATCH stream with c and as Kubernetes does, and
// says where they first disagree ("" if they do not).
func streamDiffers(c Codec[*v1alpha1.MyResource], data []byte) string {
	got := c.DecodeEvents(bytes.NewReader(data))
	frames := json.NewDecoder(bytes.NewReader(data))
	for i := 0; i <= len(data)+1; i++ {
		ev, err := got.Next()
		want := kubernetesFrame(frames)
		var skip *SkipError
		kind := "event"
		switch {
		case errors.As(err, &skip):
			kind = "skip"
		case errors.Is(err, io.EOF):
			kind = "end"
		case err != nil:
			kind = "broken"
		}
		if kind == "broken" && want.kind != "broken" && cutOrBare(want.raw) {
			return "" // a cut, or a bare word: the watcher breaks the stream
		}
		if kind != want.kind {
			return fmt.Sprintf("frame %d: the codec's %s (%v), Kubernetes' %s, of %.300q", i, kind, err, want.kind, want.raw)
		}
		switch kind {
		case "skip":
			id := SkipError{What: skip.What, Key: skip.Key, RV: skip.RV, UID: skip.UID}
			if id != want.skip {
				return fmt.Sprintf("frame %d skipped as %+v (%v), Kubernetes skips %+v, of %.300q", i, id, err, want.skip, want.raw)
			}
		case "event":
			if d := eventDiffers(ev, want.ev); d != "" {
				return fmt.Sprintf("frame %d: %s, of %.300q", i, d, want.raw)
			}
		default:
			return ""
		}
	}
	return "no end after more calls than bytes"
}

// cutOrBare: a frame Kubernetes read across a line break, or a bare
// JSON value (no object).
func cutOrBare(raw []byte) bool {
	raw = bytes.TrimSpace(raw)
	return bytes.ContainsAny(raw, "\n\r") || len(raw) == 0 || raw[0] != '{'
}

// eventDiffers compares an event with Kubernetes' reading of its frame:
// the same type, resourceVersion, object (its managedFields reduced on
// both sides to the newest time, all the watcher keeps), and ERROR (the
// same Status, or neither a Status).
func eventDiffers(got, want Event[*v1alpha1.MyResource]) string {
	gs, gok := got.Err.(*apierrors.StatusError)
	ws, wok := want.Err.(*apierrors.StatusError)
	if gok != wok || gok && !reflect.DeepEqual(gs.ErrStatus, ws.ErrStatus) || (got.Err == nil) != (want.Err == nil) {
		return fmt.Sprintf("the ERROR %v (a Status: %v), Kubernetes' %v (a Status: %v)", got.Err, gok, want.Err, wok)
	}
	got.Err, want.Err = nil, nil
	got.Object, want.Object = newestWriteOnly(got.Object), newestWriteOnly(want.Object)
	if !reflect.DeepEqual(got, want) {
		return fmt.Sprintf("the codec's event %+v, Kubernetes' %+v", got, want)
	}
	return ""
}

// newestWriteOnly is a copy of obj whose managedFields are one entry with
// the newest time, or none if none has a time.
func newestWriteOnly(obj *v1alpha1.MyResource) *v1alpha1.MyResource {
	if obj == nil || obj.ManagedFields == nil {
		return obj
	}
	var newest *metav1.Time
	for _, e := range obj.ManagedFields {
		if e.Time != nil && (newest == nil || e.Time.After(newest.Time)) {
			newest = e.Time
		}
	}
	obj = obj.DeepCopy()
	obj.ManagedFields = []metav1.ManagedFieldsEntry{}
	if newest != nil {
		obj.ManagedFields = []metav1.ManagedFieldsEntry{{Time: newest}}
	}
	return obj
}

// pageDiffers decodes a LIST page with c and as Kubernetes does, and
// says how they disagree ("" if they do not).
func pageDiffers(c Codec[*v1alpha1.MyResource], data []byte) string {
	var items []*v1alpha1.MyResource
	var skips []SkipError
	meta, err := c.DecodeList(bytes.NewReader(data), func(o *v1alpha1.MyResource) { items = append(items, o) },
		func(s *SkipError) { skips = append(skips, SkipError{What: s.What, Key: s.Key, RV: s.RV, UID: s.UID}) })
	kmeta, kitems, kskips, ok := kubernetesPage(data)
	switch {
	case ok != (err == nil):
		return fmt.Sprintf("the codec: %v; Kubernetes reads the page: %v, of %.300q", err, ok, data)
	case !ok:
	case !reflect.DeepEqual(meta, kmeta):
		return fmt.Sprintf("metadata %+v, Kubernetes reads %+v", meta, kmeta)
	case !reflect.DeepEqual(items, kitems) || !reflect.DeepEqual(skips, kskips):
		return fmt.Sprintf("%d items, skips %+v; Kubernetes reads %d items, skips %+v, of %.300q", len(items), skips, len(kitems), kskips, data)
	}
	return ""
}

// kubernetesPage reads a LIST page as Kubernetes does (kuberef.List),
// its skips as list items.
func kubernetesPage(data []byte) (meta metav1.ListMeta, items []*v1alpha1.MyResource, skips []SkipError, ok bool) {
	meta, items, skipped, ok := kuberef.List(data)
	for _, id := range skipped {
		skips = append(skips, SkipError{What: ListItem, Key: id.Key, RV: id.RV, UID: id.UID})
	}
	return meta, items, skips, ok
}

// The explorer must catch a codec that reads a frame otherwise than
// Kubernetes: one that matches the envelope's keys in any case, as
// encoding/json does (a "TYPE" after "type" wins), is caught on the
// respelled frames of some schedule.
func TestExplorerCatchesACodecThatReadsOtherwise(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		s := newSchedule(seed)
		s.codec = anyCaseEnvelope{}
		if failure, _ := explore(t, s, DefaultBackoff); strings.Contains(failure, "the codec decodes as Kubernetes does") {
			t.Logf("caught at schedule %s: %s", s, failure)
			return
		}
	}
	t.Fatal("50 schedules with a codec that reads envelope keys in any case, and the explorer saw no frame read otherwise")
}

// anyCaseEnvelope is JSONCodec with each frame's envelope read by
// encoding/json, which matches keys in any case.
type anyCaseEnvelope struct {
	JSONCodec[*v1alpha1.MyResource]
}

func (c anyCaseEnvelope) DecodeEvents(r io.Reader) Events[*v1alpha1.MyResource] {
	return anyCaseEvents{json.NewDecoder(r), c.JSONCodec}
}

type anyCaseEvents struct {
	frames *json.Decoder
	codec  JSONCodec[*v1alpha1.MyResource]
}

func (d anyCaseEvents) Next() (Event[*v1alpha1.MyResource], error) {
	var f struct {
		Type   string
		Object json.RawMessage
	}
	if err := d.frames.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return Event[*v1alpha1.MyResource]{}, io.EOF
		}
		var typ *json.UnmarshalTypeError
		if errors.As(err, &typ) { // the frame is read: a skip
			return Event[*v1alpha1.MyResource]{}, &SkipError{What: "watch frame", Err: err}
		}
		return Event[*v1alpha1.MyResource]{}, err
	}
	if string(f.Object) == "null" {
		f.Object = nil
	}
	return EventOf(f.Type, f.Object, d.codec.Decode, kjson.UnmarshalCaseSensitivePreserveInts, Kind, Snippet)
}
