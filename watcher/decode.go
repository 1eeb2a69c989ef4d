package watcher

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	kjson "sigs.k8s.io/json"

	"rawwatch/store"
)

// Event types of the watch protocol: watch.EventType's, as strings.
const (
	Added    = string(watch.Added)
	Modified = string(watch.Modified)
	Deleted  = string(watch.Deleted)
	Bookmark = string(watch.Bookmark)
	Error    = string(watch.Error)
)

// Event is one decoded watch frame.
type Event[T Object] struct {
	Type string
	// Object is set for ADDED, MODIFIED and DELETED.
	Object T
	// RV is the event's resourceVersion (all types but ERROR).
	RV string
	// InitialEventsEnd marks the bookmark that closes a WatchList's initial
	// events (annotated metav1.InitialEventsAnnotationKey).
	InitialEventsEnd bool
	// Err is the server's error, for ERROR frames.
	Err error
}

// SkipError reports a frame or list item that could not be understood; the
// decoder goes on with the next one.
type SkipError struct {
	What string // "ADDED event", "list item", ...
	// Key, RV and UID are what the metadata still says (Identify).
	Key, RV string
	UID     types.UID
	Err     error
}

func (e *SkipError) Error() string {
	if e.Key != "" {
		return fmt.Sprintf("skipped %s for %s (resourceVersion %q): %v", e.What, e.Key, e.RV, e.Err)
	}
	return fmt.Sprintf("skipped %s: %v", e.What, e.Err)
}

func (e *SkipError) Unwrap() error { return e.Err }

// Object is what the watcher can decode: a store.Object that carries its
// apiVersion and kind (every generated Kubernetes type does, via TypeMeta).
type Object interface {
	store.Object
	GetObjectKind() schema.ObjectKind
}

// A Codec decodes what the server answers: a LIST page, a WATCH stream.
// JSONCodec, the default, decodes as client-go does; package codec has
// faster ones, and CBOR.
type Codec[T Object] interface {
	// DecodeList reads one LIST page, handing each item to add and each
	// item it cannot decode to bad. A page that is no list is an error,
	// and then nothing of it was handed over.
	DecodeList(r io.Reader, add func(T), bad func(*SkipError)) (metav1.ListMeta, error)
	// DecodeEvents reads a WATCH stream.
	DecodeEvents(r io.Reader) Events[T]
}

// Events is a WATCH stream, decoded. Next returns the next event, io.EOF at
// a clean end, a *SkipError for a frame skipped (call Next again), or
// another error for a broken stream.
type Events[T Object] interface {
	Next() (Event[T], error)
}

// JSONCodec decodes JSON as client-go does: frames one JSON value after
// another, each a metav1.WatchEvent; objects read by sigs.k8s.io/json (keys
// case-sensitive, of a key given twice the last), their kind as Kind finds it.
type JSONCodec[T Object] struct {
	// GVK, when set, is the apiVersion/kind every object must carry.
	GVK schema.GroupVersionKind
}

// Decode decodes one object; on failure, a *SkipError.
func (c JSONCodec[T]) Decode(what string, raw []byte) (T, error) {
	var obj T
	err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &obj)
	var gvk schema.GroupVersionKind
	if err == nil && !c.GVK.Empty() {
		gvk, err = Kind(raw)
	}
	return c.Checked(what, raw, obj, gvk, err, kjson.UnmarshalCaseSensitivePreserveInts)
}

// Kind is the apiVersion and kind of an object's JSON as client-go's
// serializer finds them: keys in any case, of a key given twice the last.
func Kind(raw []byte) (schema.GroupVersionKind, error) {
	gvk, err := kjsonserializer.DefaultMetaFactory.Interpret(raw)
	if err != nil {
		return schema.GroupVersionKind{}, err
	}
	return *gvk, nil
}

// ListItem is what a LIST page's item is called in a SkipError, and what
// tells Checked that an object is one.
const ListItem = "list item"

// Checked finishes a decode, for every codec: a null object is an error, and
// so is one whose kind is not c.GVK, as the serializer finds it (gvk) or as
// the object holds it; an error comes back as a *SkipError (Identify). A
// list item that names no kind either way is of the list's type, as
// client-go's typed list takes it.
func (c JSONCodec[T]) Checked(what string, raw []byte, obj T, gvk schema.GroupVersionKind, err error, unmarshal func([]byte, any) error) (T, error) {
	var zero T
	if err == nil && obj == zero {
		err = errors.New("object is null")
	}
	if err == nil && !c.GVK.Empty() {
		own := obj.GetObjectKind().GroupVersionKind()
		if what == ListItem && gvk.Empty() && own.Empty() {
			obj.GetObjectKind().SetGroupVersionKind(c.GVK)
			gvk, own = c.GVK, c.GVK
		}
		if gvk != c.GVK || own != c.GVK {
			err = fmt.Errorf("got apiVersion %q kind %q (as written: %q %q), want %s", gvk.GroupVersion(), gvk.Kind, own.GroupVersion(), own.Kind, c.GVK)
		}
	}
	if err == nil {
		return obj, nil
	}
	skip := &SkipError{What: what, Err: err}
	skip.Key, skip.RV, skip.UID = Identify(raw, unmarshal)
	return zero, skip
}

// Identify reads what a skipped object's metadata still says: its key,
// resourceVersion and UID, each on its own, so that a wrong type loses
// only that one.
func Identify(raw []byte, unmarshal func([]byte, any) error) (key, rv string, uid types.UID) {
	var id struct {
		Metadata struct {
			Name            any `json:"name"`
			Namespace       any `json:"namespace"`
			ResourceVersion any `json:"resourceVersion"`
			UID             any `json:"uid"`
		} `json:"metadata"`
	}
	_ = unmarshal(raw, &id) // not JSON: nothing is read; a type error: the rest is
	m := id.Metadata
	name, _ := m.Name.(string)
	ns, nsOK := m.Namespace.(string)
	if name != "" && (nsOK || m.Namespace == nil) {
		key = store.Key(ns, name)
	}
	rv, _ = m.ResourceVersion.(string)
	u, _ := m.UID.(string)
	return key, rv, types.UID(u)
}

// DecodeList reads a LIST page: see Codec.
func (c JSONCodec[T]) DecodeList(r io.Reader, add func(T), bad func(*SkipError)) (metav1.ListMeta, error) {
	return DecodeList(r, c.Decode, add, bad)
}

// DecodeList reads a JSON LIST page as Kubernetes reads one (one object,
// nothing after it), decoding each item with decode: one that fails is
// skipped (Kubernetes would fail the page); a page with neither items nor
// a resourceVersion is an error.
func DecodeList[T Object](r io.Reader, decode func(what string, raw []byte) (T, error), add func(T), bad func(*SkipError)) (metav1.ListMeta, error) {
	var page struct {
		Metadata metav1.ListMeta `json:"metadata"`
		Items    json.RawMessage `json:"items"` // "null" if null, empty if absent
	}
	var items []json.RawMessage
	body, err := io.ReadAll(r)
	if err == nil {
		err = kjson.UnmarshalCaseSensitivePreserveInts(body, &page)
	}
	if err == nil && len(page.Items) > 0 {
		err = kjson.UnmarshalCaseSensitivePreserveInts(page.Items, &items)
	}
	if err == nil && len(page.Items) == 0 && page.Metadata.ResourceVersion == "" {
		err = errors.New("response has neither items nor metadata")
	}
	if err != nil {
		return page.Metadata, fmt.Errorf("decoding list: %w", err)
	}
	for _, raw := range items {
		obj, err := decode(ListItem, raw)
		if err != nil {
			bad(err.(*SkipError))
			continue
		}
		add(obj)
	}
	return page.Metadata, nil
}

// DecodeEvents reads a WATCH stream: see Codec.
func (c JSONCodec[T]) DecodeEvents(r io.Reader) Events[T] {
	return &jsonEvents[T]{frames: json.NewDecoder(r), codec: c}
}

// jsonEvents reads a stream's frames, one JSON value after another.
type jsonEvents[T Object] struct {
	frames *json.Decoder
	codec  JSONCodec[T]
}

func (d *jsonEvents[T]) Next() (Event[T], error) {
	var raw json.RawMessage
	if err := d.frames.Decode(&raw); err != nil {
		if errors.Is(err, io.EOF) {
			return Event[T]{}, io.EOF
		}
		return Event[T]{}, fmt.Errorf("malformed watch frame: %w", err)
	}
	var f metav1.WatchEvent
	err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &f)
	if err == nil {
		err = d.codec.CheckEnvelope(raw)
	}
	if err != nil {
		return Event[T]{}, &SkipError{What: "watch frame", Err: err}
	}
	return EventOf(f.Type, f.Object.Raw, d.codec.Decode, kjson.UnmarshalCaseSensitivePreserveInts, Kind, Snippet)
}

// CheckEnvelope checks the apiVersion and kind a frame's envelope names
// (Kind), for any codec: it passes when both the typed and the dynamic
// client take it (no apiVersion; no kind, or WatchEvent).
func (JSONCodec[T]) CheckEnvelope(frame []byte) error {
	gvk, err := Kind(frame)
	if err == nil && (!gvk.GroupVersion().Empty() || gvk.Kind != "" && gvk.Kind != "WatchEvent") {
		err = fmt.Errorf("the frame names apiVersion %q kind %q: not a watch event", gvk.GroupVersion(), gvk.Kind)
	}
	return err
}

// EventOf makes an Event of a frame's type and object, for every codec:
// object decodes an ADDED, MODIFIED or DELETED's object (an error that is
// no *SkipError breaks the stream); unmarshal, kind (Kind for JSON) and
// show (to quote bytes) serve a BOOKMARK and an ERROR.
func EventOf[T Object](typ string, raw []byte, object func(what string, raw []byte) (T, error),
	unmarshal func([]byte, any) error, kind func([]byte) (schema.GroupVersionKind, error), show func([]byte) string) (Event[T], error) {
	switch typ {
	case Added, Modified, Deleted:
		if len(raw) == 0 { // absent, or null (runtime.RawExtension's)
			return Event[T]{Type: typ}, &SkipError{What: EventWhat(typ), Err: errors.New("event without an object")}
		}
		obj, err := object(EventWhat(typ), raw)
		if err != nil {
			return Event[T]{Type: typ}, err
		}
		return Event[T]{Type: typ, Object: obj, RV: obj.GetResourceVersion()}, nil
	case Bookmark:
		var tm struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := unmarshal(raw, &tm); err != nil || tm.Metadata.ResourceVersion == "" {
			return Event[T]{Type: typ}, &SkipError{What: "BOOKMARK", Err: fmt.Errorf("no resourceVersion in %s", show(raw))}
		}
		return Event[T]{Type: Bookmark, RV: tm.Metadata.ResourceVersion,
			InitialEventsEnd: tm.Metadata.Annotations[metav1.InitialEventsAnnotationKey] == "true"}, nil
	case Error:
		// A Status is the server's word; anything else is an error of its
		// own, as client-go's dynamic client decodes it (errorObject).
		err := errorObject(raw, unmarshal, kind)
		if _, ok := err.(*apierrors.StatusError); !ok {
			err = &UnexpectedErrorObject{Object: show(raw), Err: err}
		}
		return Event[T]{Type: Error, Err: err}, nil
	}
	return Event[T]{Type: typ}, &SkipError{What: "watch frame", Err: fmt.Errorf("unknown event type %q", typ)}
}

// errorScheme knows what the dynamic client's does (client-go/dynamic's
// basicScheme): meta/v1's types in v1, Status among them.
var errorScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return s
}()

// errorObject is the error apierrors.FromObject makes of an ERROR's object
// decoded as the dynamic client does: a kind its scheme knows as that type
// (Status in any version), any other unstructured; or why it cannot.
func errorObject(raw []byte, unmarshal func([]byte, any) error, kind func([]byte) (schema.GroupVersionKind, error)) error {
	gvk, err := kind(raw)
	switch {
	case err != nil:
		return err
	case gvk.Kind == "":
		return errors.New("the object names no kind")
	case gvk.Version == "":
		return errors.New("the object names no apiVersion")
	}
	if obj, err := errorScheme.New(gvk); err == nil {
		if err := unmarshal(raw, obj); err != nil {
			return err
		}
		return apierrors.FromObject(obj)
	}
	var content map[string]any
	if err := unmarshal(raw, &content); err != nil {
		return err
	}
	return apierrors.FromObject(&unstructured.Unstructured{Object: content})
}

// EventWhat names an object event in a SkipError (a constant string).
func EventWhat(typ string) string {
	switch typ {
	case Added:
		return Added + " event"
	case Modified:
		return Modified + " event"
	}
	return Deleted + " event"
}

// Snippet quotes the start of a JSON text in an error.
func Snippet(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

// asSkip is errors.As(err, *SkipError), without allocating when err is nil
// or a *SkipError itself.
func asSkip(err error) *SkipError {
	if skip, ok := err.(*SkipError); ok || err == nil {
		return skip
	}
	var skip *SkipError
	errors.As(err, &skip)
	return skip
}
