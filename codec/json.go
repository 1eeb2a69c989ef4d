// Package codec holds what makes decoding fast, behind the watcher's Codec
// seam: JSON read in one pass by a type's own decoder (package metajson;
// api/v1alpha1's MyResource has one), managedFields reduced as they are
// read, label maps shared along a stream, a strict frame reader; and CBOR
// (KEP-4222). Every codec here decodes what watcher.JSONCodec decodes, as
// client-go does: the reference tests and fuzz targets hold them equal.
package codec

import (
	"fmt"
	"io"
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"rawwatch/codec/metajson"
	"rawwatch/watcher"
)

// JSON is the fast JSON codec. It decodes as watcher.JSONCodec does; when
// T implements JSONDecoder, it first tries T's own decoder, and decodes the
// plain way only when that one declines.
type JSON[T watcher.Object] struct {
	// GVK, when set, is the apiVersion/kind every object must carry.
	GVK schema.GroupVersionKind
	// SharesLabels, when set and true, lets the objects T's own decoder
	// reads whose labels are written alike, one after another in a page or
	// a stream, hold one map (metajson.LabelCache): set it to the store's
	// SharesLabels (store.Share).
	SharesLabels func() bool
	// labels is the cache of one page or stream (withLabels).
	labels *metajson.LabelCache
}

// JSONDecoder is implemented by an object type with a decoder of its own,
// without reflection (api/v1alpha1's MyResource has one). DecodeJSONFrom,
// called on a fresh object, reads the JSON value at d exactly as
// metajson.Plain would decode it (with d's NewestWriteOnly, managedFields
// reduced to the newest time) and stops after it, or returns an error (it
// declines): the codec then decodes the object with metajson.Plain, whose
// result counts. So a JSONDecoder changes only how fast objects decode.
type JSONDecoder interface {
	DecodeJSONFrom(d *metajson.Decoder) error
}

// withLabels is c for one page or stream: with a label cache of its own
// when the store shares label maps.
func (c JSON[T]) withLabels() JSON[T] {
	if c.SharesLabels != nil && c.SharesLabels() {
		c.labels = new(metajson.LabelCache)
	}
	return c
}

// Decode decodes one object. On failure it returns a *watcher.SkipError
// carrying whatever of the object's identity could still be read.
func (c JSON[T]) Decode(what string, raw []byte) (T, error) {
	return c.decode(what, raw, false)
}

// decode is Decode; with newestWrite, the object's managedFields come out
// reduced to one entry with the newest time, all a watch event needs (see
// metajson.Options and withoutManagedFields).
//
// The apiVersion and kind checked are the ones client-go's JSON serializer
// finds (watcher.Kind: keys in any case), which the object's own, read
// case-sensitively, may not be ("kind" then "KIND"): T's own decoder
// declines such an object (metajson.Decoder.Fields), and the plain way asks
// the serializer's rule.
func (c JSON[T]) decode(what string, raw []byte, newestWrite bool) (T, error) {
	obj, own, err := decodeObject[T](raw, metajson.Options{NewestWriteOnly: newestWrite, Labels: c.labels})
	var gvk schema.GroupVersionKind
	switch {
	case err != nil || c.GVK.Empty():
	case own:
		gvk = obj.GetObjectKind().GroupVersionKind()
	default:
		gvk, err = watcher.Kind(raw)
	}
	return watcher.JSONCodec[T]{GVK: c.GVK}.Checked(what, raw, obj, gvk, err, metajson.Plain)
}

// decodeObject decodes raw into a new T: with T's own decoder when it has
// one and it does not decline, else with metajson.Plain (with
// NewestWriteOnly, after cutting managedFields in the bytes). own says
// which.
func decodeObject[T watcher.Object](raw []byte, opts metajson.Options) (obj T, own bool, err error) {
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
func fresh[T watcher.Object]() (obj T, own JSONDecoder) {
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
func decodePlain[T watcher.Object](raw []byte, newestWrite bool) (T, error) {
	if newestWrite {
		raw = withoutManagedFields(raw)
	}
	var obj T
	err := metajson.Plain(raw, &obj)
	return obj, err
}

// DecodeList reads a LIST page as watcher.DecodeList does, each item with
// Decode.
func (c JSON[T]) DecodeList(r io.Reader, add func(T), bad func(*watcher.SkipError)) (metav1.ListMeta, error) {
	return watcher.DecodeList(r, c.withLabels().Decode, add, bad)
}

// DecodeEvents reads a WATCH stream with the frame reader (frames.go).
func (c JSON[T]) DecodeEvents(r io.Reader) watcher.Events[T] {
	return newEventDecoder(r, c.withLabels())
}

// eventDecoder reads watch frames from a stream.
type eventDecoder[T watcher.Object] struct {
	frames *FrameReader
	codec  JSON[T]
	dec    metajson.Decoder // onePass's, reset per frame (not one made per frame)
	fields metajson.FieldsCache
}

func newEventDecoder[T watcher.Object](r io.Reader, c JSON[T]) *eventDecoder[T] {
	return &eventDecoder[T]{frames: NewFrameReader(r, 0), codec: c}
}

// Next returns the next event: see watcher.Events.
func (d *eventDecoder[T]) Next() (watcher.Event[T], error) {
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
func (d *eventDecoder[T]) next() (watcher.Event[T], error) {
	raw, err := d.frames.Next()
	if err != nil {
		return watcher.Event[T]{}, err
	}
	if ev, ok, err := d.onePass(raw); ok {
		return ev, err
	}
	typ, object, fast := envelope(raw)
	if !fast { // the plain way, Kubernetes' own, which also reports a broken frame
		var f metav1.WatchEvent
		if err := metajson.Plain(raw, &f); err != nil {
			if metajson.IsSyntaxError(err) {
				return watcher.Event[T]{}, fmt.Errorf("malformed watch frame: %w", err)
			}
			// Well-formed JSON of the wrong shape: the frame is consumed.
			return watcher.Event[T]{}, &watcher.SkipError{What: "watch frame", Err: err}
		}
		if err := (watcher.JSONCodec[T]{}).CheckEnvelope(raw); err != nil {
			return watcher.Event[T]{}, &watcher.SkipError{What: "watch frame", Err: err}
		}
		typ, object = f.Type, f.Object.Raw
	}
	return watcher.EventOf(typ, object, func(what string, raw []byte) (T, error) {
		obj, err := d.codec.decode(what, raw, true)
		if skip, ok := err.(*watcher.SkipError); fast && len(raw) > 0 && ok && metajson.IsSyntaxError(skip.Err) {
			// Not JSON: the stream is broken, as the plain way would say
			// (skipping the frame would lose its event).
			return obj, fmt.Errorf("malformed watch frame: %w", skip.Err)
		}
		return obj, err
	}, metajson.Plain, watcher.Kind, watcher.Snippet)
}

// onePass decodes the usual frame of an object event, {"type":…,"object":{…}}
// (its two members in either order, others skipped), in one pass over the
// frame with T's own decoder, which reads the object where it stands. ok is
// false when it cannot: T has no decoder of its own, or the frame is not the
// usual one (a key of the envelope twice, an escaped key, another event
// type, anything the decoder declines). Then Next decodes the frame as
// before, envelope and object apart, and that decodes it exactly as
// Kubernetes does (FuzzFastDecoder); so does onePass, when it decodes at all.
func (d *eventDecoder[T]) onePass(frame []byte) (ev watcher.Event[T], ok bool, err error) {
	obj, own := fresh[T]()
	if own == nil {
		return ev, false, nil
	}
	dec := &d.dec
	dec.Reset(frame, metajson.Options{NewestWriteOnly: true, Labels: d.codec.labels, Fields: &d.fields})
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
			case watcher.Added, watcher.Modified, watcher.Deleted:
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
		if envelopeKind(key) { // the serializer's to judge (next)
			return metajson.ErrDecline
		}
		_, err := dec.Skip() // (keys match case-sensitively, as in metav1.WatchEvent)
		return err
	}) != nil || seen != 3 {
		return ev, false, nil
	}
	what := watcher.EventWhat(typ)
	gvk := obj.GetObjectKind().GroupVersionKind()
	if obj, err = (watcher.JSONCodec[T]{GVK: d.codec.GVK}).Checked(what, frame[start:end], obj, gvk, nil, metajson.Plain); err != nil {
		return watcher.Event[T]{Type: typ}, true, err
	}
	return watcher.Event[T]{Type: typ, Object: obj, RV: obj.GetResourceVersion()}, true, nil
}
