package watcher

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/types"

	"rawwatch/internal/metajson"
	"rawwatch/store"
)

// Event types of the watch protocol.
const (
	Added    = "ADDED"
	Modified = "MODIFIED"
	Deleted  = "DELETED"
	Bookmark = "BOOKMARK"
	Error    = "ERROR"
)

// initialEventsEnd is the annotation on the bookmark that ends a WatchList's
// initial events (metav1.InitialEventsAnnotationKey).
const initialEventsEnd = metav1.InitialEventsAnnotationKey

// Event is one decoded watch frame.
type Event[T Object] struct {
	Type string
	// Object is set for ADDED, MODIFIED and DELETED.
	Object T
	// RV is the event's resourceVersion (all types but ERROR).
	RV string
	// InitialEventsEnd marks the bookmark that closes a WatchList's initial events.
	InitialEventsEnd bool
	// Err is the server's error, for ERROR frames.
	Err error
}

// SkipError reports a frame or list item that could not be understood. It is
// not fatal: the decoder can go on with the next one.
type SkipError struct {
	What string // "ADDED event", "list item", ...
	// Key, RV and UID are recovered from the metadata when possible. The
	// UID tells a relist whether the undecodable item is the object the
	// store holds for the key, or another one made since (store.Replacement.Keep).
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

// Codec turns one object's JSON into T and checks its apiVersion/kind.
//
// It decodes as Kubernetes does (metajson.Plain: encoding/json's rules, keys
// matched case-sensitively). When T implements JSONDecoder, it first tries
// T's own decoder, and decodes the plain way only when that one declines.
type Codec[T Object] struct {
	// GVK, when set, is the apiVersion/kind every object must carry.
	GVK schema.GroupVersionKind
	// labels, when set, gives the objects T's own decoder reads whose
	// labels are written alike one map (Watcher.codec: one per LIST page
	// or WATCH stream).
	labels *metajson.LabelCache
}

type typeAndMeta struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
}

// JSONDecoder is implemented by an object type with a decoder of its own,
// without reflection (api/v1alpha1's MyResource has one). DecodeJSONFrom,
// called on a fresh object, reads the JSON value at d exactly as
// metajson.Plain would decode it (with d's NewestWriteOnly, managedFields
// reduced to the newest time) and stops after it, or returns an error (it
// declines): the Codec then decodes the object with metajson.Plain, whose
// result counts. So a JSONDecoder changes only how fast objects decode.
type JSONDecoder interface {
	DecodeJSONFrom(d *metajson.Decoder) error
}

// Decode decodes one object. On failure it returns a *SkipError carrying
// whatever of the object's identity could still be read.
func (c Codec[T]) Decode(what string, raw []byte) (T, error) {
	return c.decode(what, raw, false)
}

// decode is Decode; with newestWrite, the object's managedFields come out
// reduced to one entry with the newest time, all a watch event needs (see
// metajson.Options and withoutManagedFields).
//
// The apiVersion and kind checked are the ones client-go's JSON serializer
// finds (its MetaFactory: encoding/json's rules, keys in any case, of a key
// given twice the last), which the object's own, read case-sensitively,
// may not be ("kind" then "KIND"): T's own decoder declines such an object
// (metajson.Decoder.Fields), and the plain way asks the MetaFactory.
func (c Codec[T]) decode(what string, raw []byte, newestWrite bool) (T, error) {
	obj, own, err := decodeObject[T](raw, metajson.Options{NewestWriteOnly: newestWrite, Labels: c.labels})
	var gvk *schema.GroupVersionKind
	if err == nil && !own && !c.GVK.Empty() {
		gvk, err = kjsonserializer.DefaultMetaFactory.Interpret(raw)
	}
	return c.checked(what, raw, obj, gvk, err, "", metajson.Plain)
}

// checked finishes a decode of either wire: a null object or one of
// another apiVersion/kind (gvk, or if nil the object's own) is an error
// too, and an error comes back as a *SkipError (its message after prefix)
// carrying whatever of the object's identity unmarshal can still read:
// key, resourceVersion, UID.
func (c Codec[T]) checked(what string, raw []byte, obj T, gvk *schema.GroupVersionKind, err error, prefix string, unmarshal func([]byte, any) error) (T, error) {
	var zero T
	if err == nil && obj == zero {
		err = errors.New("object is null")
	}
	if err == nil && !c.GVK.Empty() {
		found := obj.GetObjectKind().GroupVersionKind()
		if gvk != nil {
			found = *gvk
		}
		if found != c.GVK {
			err = fmt.Errorf("got apiVersion %q kind %q, want %s", found.GroupVersion(), found.Kind, c.GVK)
		}
	}
	if err == nil {
		return obj, nil
	}
	skip := &SkipError{What: what, Err: err}
	if prefix != "" {
		skip.Err = fmt.Errorf("%s%w", prefix, err)
	}
	skip.Key, skip.RV, skip.UID = identify(raw, unmarshal)
	return zero, skip
}

// identify reads what a skipped object's metadata still says: its name and
// namespace (its key), resourceVersion and UID, each on its own, so that a
// wrong type anywhere else, or in one of them, loses only that one; and
// with the key, what a relist keeps and a DELETED deletes. Each is the
// last value given for it, if that is a string; the key needs a name, and
// a namespace that is a string or absent.
func identify(raw []byte, unmarshal func([]byte, any) error) (key, rv string, uid types.UID) {
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

// decodeObject decodes raw into a new T: with T's own decoder when it has
// one and it does not decline, else with metajson.Plain (with
// NewestWriteOnly, after cutting managedFields in the bytes).
// own says which.
func decodeObject[T Object](raw []byte, opts metajson.Options) (obj T, own bool, err error) {
	if obj, dec := fresh[T](); dec != nil {
		d := metajson.NewDecoder(raw, opts)
		if d.Whole(func() error { return dec.DecodeJSONFrom(d) }) == nil {
			return obj, true, nil
		}
	}
	obj, err = decodePlain[T](raw, opts.NewestWriteOnly)
	return obj, false, err
}

// fresh returns a new T and its own decoder, when it has one (own is nil
// otherwise).
func fresh[T Object]() (obj T, own JSONDecoder) {
	if _, ok := any(obj).(JSONDecoder); !ok {
		return obj, nil
	}
	t := reflect.TypeFor[T]()
	if t.Kind() != reflect.Pointer {
		return obj, nil
	}
	v := reflect.New(t.Elem()).Interface()
	return v.(T), v.(JSONDecoder)
}

// decodePlain is decodeObject's way without T's own decoder (its own
// function, so that the object it decodes into is on the heap only here).
func decodePlain[T Object](raw []byte, newestWrite bool) (T, error) {
	if newestWrite {
		raw = withoutManagedFields(raw)
	}
	var obj T
	err := metajson.Plain(raw, &obj)
	return obj, err
}

// decodeList reads a LIST response, handing each item to add and each item it
// cannot decode to bad, and returns the list's metadata. It reads the page
// as Kubernetes would: one JSON value (anything after it but white space is
// an error), keys matched case-sensitively, of a key given twice the last
// (items are handed over once the page has been read, the last "items"
// array's). A malformed response (not a list at all) is an error; an item
// that does not decode is skipped (Kubernetes would fail the whole page).
func decodeList[T Object](r io.Reader, c Codec[T], add func(T), bad func(*SkipError)) (metav1.ListMeta, error) {
	var meta metav1.ListMeta
	dec := json.NewDecoder(r)
	if err := expectDelim(dec, '{'); err != nil {
		return meta, fmt.Errorf("decoding list: %w", err)
	}
	var items []listed[T]
	sawItems := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return meta, fmt.Errorf("decoding list: %w", err)
		}
		switch tok {
		case "metadata":
			var raw json.RawMessage
			if err = dec.Decode(&raw); err == nil {
				err = metajson.Plain(raw, &meta)
			}
		case "items":
			sawItems = true
			items, err = decodeItems(dec, c, items[:0])
		default: // apiVersion, kind, anything new
			var skip json.RawMessage
			err = dec.Decode(&skip)
		}
		if err != nil {
			return meta, fmt.Errorf("decoding list %q: %w", tok, err)
		}
	}
	if _, err := dec.Token(); err != nil {
		return meta, fmt.Errorf("decoding list: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return meta, fmt.Errorf("decoding list: more after the list's end (%v)", err)
	}
	if !sawItems && meta.ResourceVersion == "" {
		return meta, errors.New("decoding list: response has neither items nor metadata")
	}
	for _, it := range items {
		if it.skip != nil {
			bad(it.skip)
		} else {
			add(it.obj)
		}
	}
	return meta, nil
}

// listed is one item of a LIST page: its object, or why it was skipped.
type listed[T Object] struct {
	obj  T
	skip *SkipError
}

// decodeItems reads an items array, appending its items to items.
func decodeItems[T Object](dec *json.Decoder, c Codec[T], items []listed[T]) ([]listed[T], error) {
	if tok, err := dec.Token(); err != nil {
		return items, err
	} else if tok == nil {
		return items, nil // "items": null
	} else if tok != json.Delim('[') {
		return items, fmt.Errorf("items is %v, not an array", tok)
	}
	for dec.More() {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return items, err
		}
		obj, err := c.Decode("list item", raw)
		if err != nil {
			items = append(items, listed[T]{skip: err.(*SkipError)})
			continue
		}
		items = append(items, listed[T]{obj: obj})
	}
	_, err := dec.Token() // ']'
	return items, err
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != want {
		return fmt.Errorf("expected %q, got %v", want, tok)
	}
	return nil
}

// eventDecoder reads watch frames from a stream.
type eventDecoder[T Object] struct {
	frames *FrameReader
	codec  Codec[T]
	dec    metajson.Decoder // onePass's, reset per frame (not one made per frame)
}

func newEventDecoder[T Object](r io.Reader, c Codec[T]) *eventDecoder[T] {
	return &eventDecoder[T]{frames: NewFrameReader(r, 0), codec: c}
}

// Next returns the next event. io.EOF means the server closed the stream
// cleanly; a *SkipError means this frame was skipped and Next may be called
// again; any other error means the stream is broken.
func (d *eventDecoder[T]) Next() (Event[T], error) {
	// The usual frame of a line-framed stream, taken whole by onePass,
	// needs no grammar check of the frame reader's: onePass checks every
	// byte. Any other goes to next, which gets it from the frame reader
	// checked (and decodes it again: a cost only of the unusual frames).
	if line, ok := d.frames.line(); ok {
		if ev, ok, err := d.onePass(line); ok {
			d.frames.take(line)
			return ev, err
		}
	}
	return d.next()
}

// next is Next without the line's shortcut: the frame as the frame reader
// checks it, then onePass or the envelope walk.
func (d *eventDecoder[T]) next() (Event[T], error) {
	raw, err := d.frames.Next()
	if err != nil {
		return Event[T]{}, err
	}
	if ev, ok, err := d.onePass(raw); ok {
		return ev, err
	}
	typ, object, fast := envelope(raw)
	if !fast { // the plain way, Kubernetes' own, which also reports a broken frame
		var f metav1.WatchEvent
		if err := metajson.Plain(raw, &f); err != nil {
			if metajson.IsSyntaxError(err) {
				return Event[T]{}, fmt.Errorf("malformed watch frame: %w", err)
			}
			// Well-formed JSON of the wrong shape: the frame is consumed.
			return Event[T]{}, &SkipError{What: "watch frame", Err: err}
		}
		typ, object = f.Type, f.Object.Raw
	}
	return eventOf(typ, object, func(what string, raw []byte) (T, error) {
		obj, err := d.codec.decode(what, raw, true)
		if skip := asSkip(err); fast && len(raw) > 0 && skip != nil && metajson.IsSyntaxError(skip.Err) {
			// Not JSON: the stream is broken, as the plain way would say
			// (skipping the frame would lose its event).
			return obj, fmt.Errorf("malformed watch frame: %w", skip.Err)
		}
		return obj, err
	}, metajson.Plain, snippet)
}

// onePass decodes the usual frame of an object event, {"type":…,"object":{…}}
// (its two members in either order, others skipped), in one pass over the
// frame with T's own decoder, which reads the object where it stands. ok is
// false when it cannot: T has no decoder of its own, or the frame is not the
// usual one (a key of the envelope twice, an escaped key, another event
// type, anything the decoder declines). Then
// Next decodes the frame as before, envelope and object apart, and that
// decodes it exactly as Kubernetes does (FuzzFastDecoder); so does onePass,
// when it decodes at all.
func (d *eventDecoder[T]) onePass(frame []byte) (ev Event[T], ok bool, err error) {
	obj, own := fresh[T]()
	if own == nil {
		return ev, false, nil
	}
	dec := &d.dec
	dec.Reset(frame, metajson.Options{NewestWriteOnly: true, Labels: d.codec.labels})
	defer dec.Reset(nil, metajson.Options{}) // the frame's buffer is the reader's
	var typ string
	var start, end int // the object's bytes
	var seen uint64
	if dec.Object(func(key []byte) error {
		switch string(key) {
		case "type":
			if err := metajson.Seen(&seen, 0); err != nil {
				return err
			}
			t, err := dec.PlainString()
			if err != nil {
				return err
			}
			switch typ = eventType(t); typ {
			case Added, Modified, Deleted:
				return nil
			}
			return metajson.ErrDecline // bookmarks, errors: small and few
		case "object":
			if err := metajson.Seen(&seen, 1); err != nil {
				return err
			}
			start = dec.Offset()
			if err := own.DecodeJSONFrom(dec); err != nil {
				return err
			}
			end = dec.Offset()
			return nil
		}
		_, err := dec.Skip() // (keys match case-sensitively, as in metav1.WatchEvent)
		return err
	}) != nil || seen != 3 {
		return ev, false, nil
	}
	if obj, err = d.codec.checked(eventWhat(typ), frame[start:end], obj, nil, nil, "", metajson.Plain); err != nil {
		return Event[T]{Type: typ}, true, err
	}
	return Event[T]{Type: typ, Object: obj, RV: obj.GetResourceVersion()}, true, nil
}

// asSkip is errors.As(err, *SkipError) that allocates nothing for the
// usual cases, no error or a *SkipError itself (errors.As needs its target
// on the heap), once per event.
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

// eventOf makes an Event of a frame's type and object, the part of the
// protocol both wires share: object decodes the object of an ADDED, MODIFIED
// or DELETED; unmarshal decodes a BOOKMARK's metadata and an ERROR's Status;
// show quotes bytes in an error. An error from object that is not a
// *SkipError breaks the stream.
func eventOf[T Object](typ string, raw []byte, object func(what string, raw []byte) (T, error),
	unmarshal func([]byte, any) error, show func([]byte) string) (Event[T], error) {
	switch typ {
	case Added, Modified, Deleted:
		if len(raw) == 0 { // absent, or null (runtime.RawExtension's)
			return Event[T]{Type: typ}, &SkipError{What: eventWhat(typ), Err: errors.New("event without an object")}
		}
		obj, err := object(eventWhat(typ), raw)
		if err != nil {
			return Event[T]{Type: typ}, err
		}
		return Event[T]{Type: typ, Object: obj, RV: obj.GetResourceVersion()}, nil
	case Bookmark:
		var tm typeAndMeta
		if err := unmarshal(raw, &tm); err != nil || tm.Metadata.ResourceVersion == "" {
			return Event[T]{Type: typ}, &SkipError{What: "BOOKMARK", Err: fmt.Errorf("no resourceVersion in %s", show(raw))}
		}
		return Event[T]{Type: Bookmark, RV: tm.Metadata.ResourceVersion,
			InitialEventsEnd: tm.Metadata.Annotations[initialEventsEnd] == "true"}, nil
	case Error:
		// A Status is the server's word, whatever of it is set; anything
		// else is an error of its own. Which is which is
		// apierrors.FromObject's to say, as client-go's dynamic client
		// decodes the object (unstructured: kind "Status", apiVersion v1
		// or meta.k8s.io/v1).
		var content map[string]any
		err := unmarshal(raw, &content)
		if err == nil {
			err = apierrors.FromObject(&unstructured.Unstructured{Object: content})
		}
		if _, ok := err.(*apierrors.StatusError); !ok {
			err = &UnexpectedErrorObject{Object: show(raw), Err: err}
		}
		return Event[T]{Type: Error, Err: err}, nil
	}
	return Event[T]{Type: typ}, &SkipError{What: "watch frame", Err: fmt.Errorf("unknown event type %q", typ)}
}

// eventWhat names an object event in a SkipError, without a string made
// per event.
func eventWhat(typ string) string {
	switch typ {
	case Added:
		return Added + " event"
	case Modified:
		return Modified + " event"
	}
	return Deleted + " event"
}

func snippet(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}
