package codec

import (
	"errors"
	"fmt"
	"io"
	"reflect"

	"github.com/fxamacker/cbor/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"rawwatch/watcher"
)

// CBOR (RFC 8949) as kube-apiserver serves it with CBORServingAndStorage
// (KEP-4222): a LIST page is one data item, a map like the JSON object
// (same keys); a WATCH is a CBOR Sequence (RFC 8742, application/cbor-seq),
// one data item per event, {"type": …, "object": …}, each starting with the
// self-described CBOR tag. Objects decode into the same Go types as JSON,
// by their json tags, with the options apimachinery's CBOR serializer
// decodes with in its lax (non-strict) mode: unknown fields are ignored,
// keys match case-sensitively (as Kubernetes' JSON decoding does), duplicate
// keys are refused. Types with their own JSON decoding need their own CBOR
// decoding too (every apimachinery type has it: Time, FieldsV1, Quantity).

// selfDescribedCBOR starts every CBOR data item kube-apiserver writes.
var selfDescribedCBOR = []byte{0xd9, 0xd9, 0xf7}

// cborMode is apimachinery's runtime/serializer/cbor DecodeLax, option for
// option (its modes package is internal), without the transcoding of types
// that only know JSON.
var cborMode = func() cbor.DecMode {
	var opts []func(*cbor.SimpleValueRegistry) error
	for sv := 0; sv <= 255; sv++ {
		switch sv {
		case 20, 21, 22, 24, 25, 26, 27, 28, 29, 30, 31: // false, true, null, reserved
		default:
			opts = append(opts, cbor.WithRejectedSimpleValue(cbor.SimpleValue(sv)))
		}
	}
	simple, err := cbor.NewSimpleValueRegistryFromDefaults(opts...)
	if err != nil {
		panic(err)
	}
	dm, err := cbor.DecOptions{
		DupMapKey:                cbor.DupMapKeyEnforcedAPF,
		TimeTag:                  cbor.DecTagOptional,
		MaxNestedLevels:          10000,
		MaxArrayElements:         2147483647,
		MaxMapPairs:              2097152,
		IndefLength:              cbor.IndefLengthAllowed,
		TagsMd:                   cbor.TagsAllowed,
		IntDec:                   cbor.IntDecConvertSignedOrFail,
		MapKeyByteString:         cbor.MapKeyByteStringForbidden,
		DefaultMapType:           reflect.TypeOf(map[string]any(nil)),
		UTF8:                     cbor.UTF8RejectInvalid,
		FieldNameMatching:        cbor.FieldNameMatchingCaseSensitive,
		DefaultByteStringType:    reflect.TypeOf(""),
		ByteStringToString:       cbor.ByteStringToStringAllowedWithExpectedLaterEncoding,
		FieldNameByteString:      cbor.FieldNameByteStringAllowed,
		UnrecognizedTagToAny:     cbor.UnrecognizedTagContentToAny,
		TimeTagToAny:             cbor.TimeTagToRFC3339Nano,
		ByteStringToTime:         cbor.ByteStringToTimeAllowed,
		NaN:                      cbor.NaNDecodeForbidden,
		Inf:                      cbor.InfDecodeForbidden,
		ByteStringExpectedFormat: cbor.ByteStringExpectedBase64,
		BignumTag:                cbor.BignumTagForbidden,
		SimpleValues:             simple,
		BinaryUnmarshaler:        cbor.BinaryUnmarshalerNone,
		TextUnmarshaler:          cbor.TextUnmarshalerTextString,
	}.DecMode()
	if err != nil {
		panic(err)
	}
	return dm
}()

// decodeCBOR decodes one object's CBOR, of gvk if set. Its apiVersion and
// kind are its TypeMeta's: apimachinery's CBOR serializer finds them so
// (case-sensitively).
func decodeCBOR[T watcher.Object](gvk schema.GroupVersionKind, what string, raw []byte) (T, error) {
	var obj T
	err := cborMode.Unmarshal(raw, &obj)
	if err != nil {
		err = fmt.Errorf("cbor: %w", err)
	}
	var zero T
	var found schema.GroupVersionKind
	if err == nil && obj != zero {
		found = obj.GetObjectKind().GroupVersionKind()
	}
	return watcher.JSONCodec[T]{GVK: gvk}.Checked(what, raw, obj, found, err, cborMode.Unmarshal)
}

// cborList is a LIST page, its items left for one by one decoding.
type cborList struct {
	Metadata metav1.ListMeta   `json:"metadata"`
	Items    []cbor.RawMessage `json:"items"`
}

// decodeCBORList is decodeList for a CBOR page. The page is read whole (a
// JSON page is read item by item): at most the page's size twice in memory.
func decodeCBORList[T watcher.Object](r io.Reader, gvk schema.GroupVersionKind, add func(T), bad func(*watcher.SkipError)) (metav1.ListMeta, error) {
	page, err := io.ReadAll(r)
	if err != nil {
		return metav1.ListMeta{}, fmt.Errorf("decoding list: %w", err)
	}
	var l cborList
	if err := cborMode.Unmarshal(page, &l); err != nil {
		return metav1.ListMeta{}, fmt.Errorf("decoding CBOR list: %w", err)
	}
	if l.Items == nil && l.Metadata.ResourceVersion == "" {
		return l.Metadata, errors.New("decoding CBOR list: response has neither items nor metadata")
	}
	for _, raw := range l.Items {
		obj, err := decodeCBOR[T](gvk, watcher.ListItem, raw)
		if err != nil {
			bad(err.(*watcher.SkipError))
			continue
		}
		add(obj)
	}
	return l.Metadata, nil
}

// cborEventDecoder reads the events of a CBOR WATCH stream.
type cborEventDecoder[T watcher.Object] struct {
	in     *boundedReader
	dec    *cbor.Decoder
	gvk    schema.GroupVersionKind
	object cbor.RawMessage // the last frame's object, its buffer reused
}

// newCBOREventDecoder reads frames of at most max bytes (DefaultMaxFrame if 0).
func newCBOREventDecoder[T watcher.Object](r io.Reader, gvk schema.GroupVersionKind, max int) *cborEventDecoder[T] {
	if max <= 0 {
		max = DefaultMaxFrame
	}
	in := &boundedReader{r: r, max: max}
	d := &cborEventDecoder[T]{in: in, dec: cborMode.NewDecoder(in), gvk: gvk}
	in.used = d.dec.NumBytesRead
	return d
}

// boundedReader fails a read once the bytes read and not yet decoded (the
// frame being read) exceed max: CBOR heads announce any length, and a
// stream must not grow a frame without bound (FrameReader's bound).
type boundedReader struct {
	r    io.Reader
	read int
	used func() int
	max  int
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.read-b.used() > b.max {
		return 0, fmt.Errorf("%w (%d bytes)", ErrFrameTooLarge, b.max)
	}
	n, err := b.r.Read(p)
	b.read += n
	return n, err
}

type cborFrame struct {
	Type   string          `json:"type"`
	Object cbor.RawMessage `json:"object"`
}

// Next is watcher.Events' Next for CBOR: io.EOF, a *SkipError for a frame that
// is well formed but not an event that can be decoded (the stream goes on),
// any other error for a broken stream.
func (d *cborEventDecoder[T]) Next() (watcher.Event[T], error) {
	before := d.dec.NumBytesRead()
	f := cborFrame{Object: d.object[:0]}
	err := d.dec.Decode(&f)
	d.object = f.Object[:0]
	if err != nil {
		if d.dec.NumBytesRead() > before { // well formed, consumed: skip it
			return watcher.Event[T]{}, &watcher.SkipError{What: "watch frame", Err: fmt.Errorf("cbor: %w", err)}
		}
		return watcher.Event[T]{}, err
	}
	object := func(what string, raw []byte) (T, error) { return decodeCBOR[T](d.gvk, what, raw) }
	return watcher.EventOf(f.Type, f.Object, object, cborMode.Unmarshal, cborKind,
		func(b []byte) string { return fmt.Sprintf("CBOR %x", short(b)) })
}

// cborKind is the apiVersion and kind of a CBOR object, as client-go's
// CBOR serializer finds them (its MetaFactory: the object read as a
// metav1.TypeMeta).
func cborKind(raw []byte) (schema.GroupVersionKind, error) {
	var tm metav1.TypeMeta
	if err := cborMode.Unmarshal(raw, &tm); err != nil {
		return schema.GroupVersionKind{}, err
	}
	return tm.GroupVersionKind(), nil
}

func short(b []byte) []byte {
	if len(b) > 100 {
		return b[:100]
	}
	return b
}
