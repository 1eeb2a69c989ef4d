package watcher

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"rawwatch/api/v1alpha1"
	"rawwatch/internal/fakeapi"
)

// The explorer's respellings: each frame and LIST page the server wrote as
// usual is written again in one of the spellings below (they take turns),
// and the schedule's codec must read it as Kubernetes' decoding does
// (streamDiffers, pageDiffers). Some spellings mean the same to
// Kubernetes (escapes, spacing, member order, keys in another case, a key
// given twice), some do not (a kind in another case, a Status of another
// apiVersion, data after a page, a frame broken inside managedFields):
// either way the codec must agree. The loop never sees them.

// A frameSpelling rewrites an event frame of type typ and object obj, or
// returns nil when it does not apply.
type frameSpelling struct {
	name  string
	spell func(typ string, obj []byte) []byte
}

// owners with a null element, which Kubernetes decodes as a zero owner in
// its place, and a null member.
const nullElements = `"ownerReferences":[null,{"apiVersion":"v1","kind":"ConfigMap","name":"owner","uid":"u-owner","controller":true,"blockOwnerDeletion":null}],`

var frameSpellings = []frameSpelling{
	{"keys in another case around the envelope's", func(typ string, obj []byte) []byte {
		decoy := decoyType(typ)
		return fmt.Appendf(nil, `{"Type":%q,"OBJECT":{},"type":%q,"object":%s,"Object":null,"TYPE":%q}`, decoy, typ, obj, decoy)
	}},
	{"type and object twice, the last counting", func(typ string, obj []byte) []byte {
		return fmt.Appendf(nil, `{"type":%q,"object":{"kind":"Other"},"object":%s,"type":%q,"object":null}`, decoyType(typ), obj, typ)
	}},
	{"every a and e escaped", func(typ string, obj []byte) []byte {
		return fakeapi.EscapeLetters(fmt.Appendf(nil, `{"type":%q,"object":%s}`, typ, obj))
	}},
	{"spaced, the object first", func(typ string, obj []byte) []byte {
		return fmt.Appendf(nil, " {\t\"object\" :\r %s , \"kind\" : \"WatchEvent\" ,\"type\"\t:\t%q } ", obj, typ)
	}},
	{"a kind in another case after the kind", func(typ string, obj []byte) []byte {
		i := bytes.Index(obj, []byte(`"kind":"`)) + len(`"kind":"`)
		j := bytes.IndexByte(obj[max(i, 0):], '"')
		if i < len(`"kind":"`) || j < 0 {
			return nil
		}
		at := i + j + 1
		return event(typ, slices.Concat(obj[:at], []byte(`,"KIND":"Other"`), obj[at:]))
	}},
	{"a null element in the owners", func(typ string, obj []byte) []byte {
		return event(typ, bytes.Replace(obj, []byte(`"metadata":{`), []byte(`"metadata":{`+nullElements), 1))
	}},
	{"a field twice (the object's own decoder declines it)", func(typ string, obj []byte) []byte {
		return event(typ, bytes.Replace(obj, []byte(`"spec":{`), []byte(`"spec":{"message":"decoy",`), 1))
	}},
	{"broken inside managedFields", func(typ string, obj []byte) []byte {
		return event(typ, bytes.Replace(obj, []byte(`"fieldsV1":{`), []byte(`"fieldsV1":{"f:x":nul,`), 1))
	}},
	{"an ERROR's Status of another apiVersion", func(typ string, obj []byte) []byte {
		if typ != Error {
			return nil
		}
		return event(typ, bytes.Replace(obj, []byte(`"apiVersion":"v1"`), []byte(`"apiVersion":"v2"`), 1))
	}},
}

// event is the usual frame of typ and obj (a spelling that changed
// nothing in obj gives the frame as it came: respelledFramesDiffer takes
// the next).
func event(typ string, obj []byte) []byte {
	return fmt.Appendf(nil, `{"type":%q,"object":%s}`, typ, obj)
}

// decoyType is an event type other than typ.
func decoyType(typ string) string {
	if typ == Deleted {
		return Added
	}
	return Deleted
}

// usualFrame splits a frame written as the server writes it,
// {"type":"…","object":{…}}, into its type and object.
func usualFrame(frame []byte) (typ string, obj []byte, ok bool) {
	rest, ok := bytes.CutPrefix(frame, []byte(`{"type":"`))
	i := bytes.IndexByte(rest, '"')
	if !ok || i < 0 {
		return "", nil, false
	}
	obj, ok = bytes.CutPrefix(rest[i+1:], []byte(`,"object":{`))
	if !ok {
		return "", nil, false
	}
	obj, ok = bytes.CutSuffix(obj, []byte("}"))
	return string(rest[:i]), append([]byte("{"), obj...), ok
}

// respelledFramesDiffer writes one usual frame of a stream of d bytes
// and n usual frames (the server writes a frame a line), the (d mod n)-th,
// in one spelling (the d-th, or the next that applies), and says how the
// codec reads it otherwise than Kubernetes. One frame a stream: the cost
// of the check stays a small part of the explorer's.
func respelledFramesDiffer(c Codec[*v1alpha1.MyResource], data []byte) string {
	var usual [][]byte
	for line := range bytes.Lines(data) {
		if _, _, ok := usualFrame(bytes.TrimSpace(line)); ok {
			usual = append(usual, bytes.TrimSpace(line))
		}
	}
	if len(usual) == 0 {
		return ""
	}
	raw := usual[len(data)%len(usual)]
	typ, obj, _ := usualFrame(raw)
	for i := range frameSpellings {
		sp := frameSpellings[(len(data)+i)%len(frameSpellings)]
		f := sp.spell(typ, obj)
		if f == nil || bytes.Equal(f, raw) {
			continue
		}
		if d := streamDiffers(c, append(f, '\n')); d != "" {
			return fmt.Sprintf("%s (%s)", d, sp.name)
		}
		return ""
	}
	return ""
}

// pageSpellings rewrite a LIST page, as its bytes came.
var pageSpellings = []frameSpelling{
	{"data after the page", func(_ string, page []byte) []byte { return append(bytes.Clone(page), " {}"...) }},
	{"items twice, the first holding an object the server has not", func(_ string, page []byte) []byte {
		return append([]byte(`{"items":[{"apiVersion":"example.com/v1alpha1","kind":"MyResource","metadata":{"name":"phantom","namespace":"ns","uid":"phantom","resourceVersion":"1"}}],`), page[1:]...)
	}},
	{"the metadata's keys in another case, every a and e escaped", func(_ string, page []byte) []byte {
		return fakeapi.EscapeLetters(bytes.Replace(page, []byte(`"metadata":{"resourceVersion"`), []byte(`"metadata":{"ResourceVersion":"0","Continue":"not-a-token","resourceVersion"`), 1))
	}},
	{"a kind in another case after the first item's kind", func(_ string, page []byte) []byte {
		return bytes.Replace(page, []byte(`"kind":"MyResource"`), []byte(`"kind":"MyResource","KIND":"Other"`), 1)
	}},
	{"null elements in every item's metadata, every item's spec declined", func(_ string, page []byte) []byte {
		page = bytes.ReplaceAll(page, []byte(`"metadata":{"name":`), []byte(`"metadata":{`+nullElements+`"name":`))
		return bytes.ReplaceAll(page, []byte(`"spec":{`), []byte(`"spec":{"message":"decoy",`))
	}},
}

// respelledPagesDiffer writes one LIST page of every five (by its
// length) in one spelling (the next fifth of its length) and says how the
// codec reads it otherwise than Kubernetes.
func respelledPagesDiffer(c Codec[*v1alpha1.MyResource], data []byte) string {
	page := bytes.TrimSpace(data)
	if len(page)%5 != 0 || len(page) == 0 || page[0] != '{' || !json.Valid(page) {
		return ""
	}
	sp := pageSpellings[len(page)/5%len(pageSpellings)]
	if d := pageDiffers(c, sp.spell("", page)); d != "" {
		return fmt.Sprintf("%s (%s)", d, sp.name)
	}
	return ""
}
