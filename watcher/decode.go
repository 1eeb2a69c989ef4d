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

// SkipError reports a frame or list item that could not be understood. It is
// not fatal: the decoder can go on with the next one.
type SkipError struct {
	What string // "ADDED event", "list item", ...
	// Key, RV and UID are recovered from the metadata when possible (the UID
	// tells a relist whether the item is the stored object: Replacement.Keep).
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
	// item it cannot decode to bad, and returns the page's metadata. A
	// page that is no list at all is an error, and then nothing of it was
	// handed over.
	DecodeList(r io.Reader, add func(T), bad func(*SkipError)) (metav1.ListMeta, error)
	// DecodeEvents reads a WATCH stream.
	DecodeEvents(r io.Reader) Events[T]
}

// Events is a WATCH stream, decoded. Next returns the next event; io.EOF
// means the server closed the stream cleanly; a *SkipError means this frame
// was skipped and Next may be called again; any other error means the
// stream is broken.
type Events[T Object] interface {
	Next() (Event[T], error)
}

// JSONCodec decodes JSON as client-go does: a stream's frames one JSON value
// after another, each a metav1.WatchEvent whose object, as every LIST item,
// is read through sigs.k8s.io/json (keys matched case-sensitively, of a key
// given twice the last), its apiVersion and kind as Kind finds them.
type JSONCodec[T Object] struct {
	// GVK, when set, is the apiVersion/kind every object must carry.
	GVK schema.GroupVersionKind
}

// Decode decodes one object. On failure it returns a *SkipError carrying
// whatever of the object's identity could still be read.
func (c JSONCodec[T]) Decode(what string, raw []byte) (T, error) {
	var obj T
	err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &obj)
	var gvk schema.GroupVersionKind
	if err == nil && !c.GVK.Empty() {
		gvk, err = Kind(raw)
	}
	return c.Checked(what, raw, obj, gvk, err, kjson.UnmarshalCaseSensitivePreserveInts)
}

// Kind is the apiVersion and kind of an object's JSON as client-go's JSON
// serializer finds them (its MetaFactory: encoding/json's rules, keys in
// any case, of a key given twice the last): "kind" then "KIND" is the
// second. The object's own TypeMeta, read case-sensitively, may differ.
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

// Checked finishes a decode, for JSONCodec and the codecs of package
// codec: a null object is an error too, and so is one whose apiVersion and
// kind are not c.GVK's, as the serializer finds them (gvk) or as the
// object holds them (its TypeMeta, read case-sensitively): an object handed
// out says what it is. An error comes back as a *SkipError carrying
// whatever of the object's identity unmarshal can still read (Identify).
// A list item (what is ListItem) that names neither apiVersion nor kind,
// either way, is of the list's type, as client-go's typed list decode
// takes it: it gets c.GVK, so that it equals the same object from a watch
// event.
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

// Identify reads what a skipped object's metadata still says: its key
// (name and namespace), resourceVersion and UID, each on its own, so that a
// wrong type elsewhere, or in one of them, loses only that one. Each is the
// last value given for it, if that is a string.
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

// DecodeList reads a JSON LIST page, decoding each item with decode (a
// *SkipError: the item is skipped), as Kubernetes reads a page: one JSON
// object (anything after it but white space is an error), keys matched
// case-sensitively, of a key given twice the last. A malformed response
// (not a list at all: neither items nor a resourceVersion) is an error, and
// then no item was handed over; an item that does not decode is skipped
// (Kubernetes would fail the whole page).
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

// jsonEvents reads the frames of a stream as client-go's JSON framer does,
// one JSON value after another.
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

// CheckEnvelope checks the apiVersion and kind a watch frame's envelope
// names (for any codec: c's own fields play no part), as client-go's stream serializer finds them (Kind: any case): a
// typed client fails a frame unless, defaulted, they name a WatchEvent of
// its scheme (the objects' group and version), the dynamic client unless
// they name v1's. A frame passes when both clients take it: no apiVersion,
// and no kind or WatchEvent (what every server sends: neither).
func (JSONCodec[T]) CheckEnvelope(frame []byte) error {
	gvk, err := Kind(frame)
	if err == nil && (!gvk.GroupVersion().Empty() || gvk.Kind != "" && gvk.Kind != "WatchEvent") {
		err = fmt.Errorf("the frame names apiVersion %q kind %q: not a watch event", gvk.GroupVersion(), gvk.Kind)
	}
	return err
}

// EventOf makes an Event of a frame's type and object, the part of the
// protocol every codec shares: object decodes the object of an ADDED,
// MODIFIED or DELETED; unmarshal decodes a BOOKMARK's metadata and an
// ERROR's object, kind finds the apiVersion and kind of that object as
// client-go's serializer does (Kind for JSON); show quotes bytes in an
// error. An error from object that
// is not a *SkipError breaks the stream.
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
		// A Status is the server's word, whatever of it is set; anything
		// else is an error of its own. Which is which is
		// apierrors.FromObject's to say, of the object as client-go's
		// dynamic client decodes it: of the apiVersion and kind the
		// serializer finds (any case, both needed), a kind its scheme knows
		// (Status in any version) as that type, any other unstructured
		// (kind "Status", apiVersion v1 or meta.k8s.io/v1, read as written).
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
// (raw), decoded as client-go's dynamic client decodes it; or why it could
// not be decoded.
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

// EventWhat names an object event in a SkipError, without a string made
// per event.
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

// asSkip is errors.As(err, *SkipError) without an allocation in the usual
// cases (no error, or a *SkipError itself), once per event.
func asSkip(err error) *SkipError {
	if err == nil {
		return nil
	}
	if skip, ok := err.(*SkipError); ok {
		return skip
	}
	var skip *SkipError
	if errors.As(err, &skip) {
		return skip
	}
	return nil
}
