package codec

import (
	"bytes"
	"encoding/json"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/watcher"
)

// The event decoder's way for a frame onePass (json.go) does not take:
// an event of a type without a decoder of its own, a bookmark, an error,
// or anything unusual in the envelope or the object. A watch frame is
//
//	{"type":"MODIFIED","object":{"apiVersion":…,"metadata":{…,"managedFields":[…]},…}}
//
// and decoding it with encoding/json as a struct of a type and a raw object,
// then the object, scans the object three times and builds every
// managedFields entry — often a third of the bytes — only for the store to
// drop them. Here the envelope is walked in place (its structure checked by
// the walk, its small members by json.Valid, the object left to the check
// its decoder makes), and the object decoded with managedFields reduced to
// one entry that keeps the newest time: the server's last write, which
// WrittenAt reads. A type with a decoder of its own (JSONDecoder: MyResource)
// does that reduction as it decodes (metajson.Options.NewestWriteOnly);
// otherwise, or when it declines, the managedFields array is cut out of the
// bytes (withoutManagedFields) before the plain decoder (metajson.Plain)
// reads them. Anything unusual in the envelope (an escaped key, a type that
// is not a plain string) or in managedFields (entries that are not objects,
// members of another type, invalid JSON) takes the plain path, so the result
// is what Kubernetes' decoding gives, minus managedFields; decode_ref_test.go
// checks that on fixtures and in a fuzz target.

// envelope finds a valid frame's type and object. ok is false when the
// frame is not the usual shape; the caller then decodes it the plain way.
// It reads what metav1.WatchEvent through sigs.k8s.io/json reads: keys
// match case-sensitively (another case is an unknown member), of a key
// given twice the last counts, and an "object" that is null leaves the
// one before (runtime.RawExtension's rule); an object absent or null is nil.
func envelope(frame []byte) (typ string, object []byte, ok bool) {
	i := skipSpace(frame, 0)
	if i >= len(frame) || frame[i] != '{' {
		return "", nil, false
	}
	ok = true
	whole := eachMember(frame, i, func(key []byte, vs, ve int) bool {
		switch {
		case !plain(key):
			ok = false
		case string(key) == "type":
			v := frame[vs:ve]
			if len(v) < 2 || v[0] != '"' || !plain(v[1:len(v)-1]) {
				ok = false
				break
			}
			typ = eventType(v[1 : len(v)-1])
		case string(key) == "object":
			if v := frame[vs:ve]; string(v) != "null" {
				if object != nil { // one before: only the last is decoded
					ok = json.Valid(object)
				}
				object = v // checked when it is decoded
			}
		case envelopeKind(key): // the plain way checks it (JSONCodec.CheckEnvelope)
			ok = false
		default: // anything else must still be valid JSON
			ok = json.Valid(frame[vs:ve])
		}
		return ok
	})
	if !ok || !whole {
		return "", nil, false
	}
	switch typ {
	case watcher.Added, watcher.Modified, watcher.Deleted: // the object is checked as it is decoded
	default: // bookmarks, errors and the unknown are small: check them now
		if object != nil && !json.Valid(object) {
			return "", nil, false
		}
	}
	return typ, object, true
}

// envelopeKind tells whether an envelope's key (unescaped) is one the
// serializer reads as the frame's apiVersion or kind: encoding/json matches
// them in any case, Unicode's simple folding (a Kelvin sign is a k).
func envelopeKind(key []byte) bool {
	return bytes.EqualFold(key, []byte("kind")) || bytes.EqualFold(key, []byte("apiVersion"))
}

// eventType is the type t names: the protocol's constant for a known one, so
// that reading it allocates nothing (a string made per event can also share
// one of the allocator's 16-byte blocks with a stored object's short string,
// and live as long as it).
func eventType(t []byte) string {
	for _, known := range [...]string{watcher.Modified, watcher.Added, watcher.Deleted, watcher.Bookmark, watcher.Error} {
		if string(t) == known {
			return known
		}
	}
	return string(t)
}

// withoutManagedFields returns obj (a valid JSON object) with its
// metadata.managedFields replaced by one entry holding only the newest
// time (none if no entry has one). It returns obj itself when it cannot do
// so exactly: no metadata or managedFields, or either appearing twice, an
// escaped key, entries that are not objects, or managedFields the decoder
// would refuse (not JSON, a string or time member of another type, a time
// it cannot parse): then the decoder reads them, and says so. Keys match
// case-sensitively, as the object's decoder matches them.
func withoutManagedFields(obj []byte) []byte {
	start := skipSpace(obj, 0)
	if start >= len(obj) || obj[start] != '{' {
		return obj
	}
	meta, ok := onlyMember(obj, start, "metadata")
	if !ok || obj[meta[0]] != '{' {
		return obj
	}
	mf, ok := onlyMember(obj, meta[0], "managedFields")
	if !ok || obj[mf[0]] != '[' || !json.Valid(obj[mf[0]:mf[1]]) {
		return obj
	}
	var newestLit []byte
	fine := true
	whole := eachElement(obj, mf[0], func(es, ee int) bool {
		if obj[es] != '{' {
			fine = false
			return false
		}
		var lit []byte
		fine = eachMember(obj, es, func(key []byte, vs, ve int) bool {
			if fine = entryMember(key, obj[vs:ve]); fine && string(key) == "time" {
				lit = obj[vs:ve] // the last one wins, as in encoding/json
			}
			return fine
		}) && fine
		if !fine || lit == nil || string(lit) == "null" {
			return fine
		}
		if utcSeconds(lit) && (newestLit == nil || utcSeconds(newestLit)) {
			// What the apiserver writes: such times order as their text.
			if newestLit == nil || bytes.Compare(lit, newestLit) > 0 {
				newestLit = lit
			}
			return true
		}
		var t, was metav1.Time
		if newestLit == nil {
			newestLit = lit
		} else if t.UnmarshalJSON(lit) == nil && was.UnmarshalJSON(newestLit) == nil && t.After(was.Time) {
			newestLit = lit
		}
		return true
	})
	if !fine || !whole {
		return obj
	}
	out := make([]byte, 0, len(obj))
	out = append(out, obj[:mf[0]]...)
	if newestLit != nil {
		out = append(out, `[{"time":`...)
		out = append(out, newestLit...)
		out = append(out, "}]"...)
	} else {
		out = append(out, "[]"...)
	}
	return append(out, obj[mf[1]:]...)
}

// entryMember tells whether a member of a managedFields entry (valid JSON)
// is one metav1.ManagedFieldsEntry takes: its strings strings, its time a
// time, each or null; any other member anything. An escaped key may be any
// of them: not taken here.
func entryMember(key, v []byte) bool {
	switch string(key) {
	case "time":
		var t metav1.Time
		return string(v) == "null" || utcSeconds(v) || v[0] == '"' && t.UnmarshalJSON(v) == nil
	case "manager", "operation", "apiVersion", "fieldsType", "subresource":
		return v[0] == '"' || string(v) == "null"
	}
	return bytes.IndexByte(key, '\\') < 0
}

// plain tells whether the inside of a JSON string needs no more checking:
// no escapes, no control characters (which JSON forbids in strings).
func plain(s []byte) bool {
	for _, c := range s {
		if c < 0x20 || c == '\\' {
			return false
		}
	}
	return true
}

// utcSeconds tells whether lit is a time as the apiserver writes it,
// "2006-01-02T15:04:05Z" (quotes included): such times order as their text.
func utcSeconds(lit []byte) bool {
	if len(lit) != 22 || lit[0] != '"' || lit[5] != '-' || lit[8] != '-' || lit[11] != 'T' ||
		lit[14] != ':' || lit[17] != ':' || lit[20] != 'Z' || lit[21] != '"' {
		return false
	}
	// And a time metav1.Time reads (time.Parse, RFC 3339): of the shape but
	// not a time (month 00), it is not cut unread, so the plain decoder
	// refuses the object as Kubernetes' does. (The fallback path only: the
	// type's own decoder declines such an object first.)
	_, err := time.Parse(time.RFC3339, string(lit[1:21]))
	return err == nil
}

// onlyMember finds the value [start, end) of the member named name
// (case-sensitively, as the object is decoded) of the object at b[i]; ok is false when there is no
// such member, more than one, or an escaped key.
func onlyMember(b []byte, i int, name string) (span [2]int, ok bool) {
	found := 0
	whole := eachMember(b, i, func(key []byte, vs, ve int) bool {
		if bytes.IndexByte(key, '\\') >= 0 {
			found = 2
			return false
		}
		if string(key) == name {
			found++
			span = [2]int{vs, ve}
		}
		return true
	})
	return span, whole && found == 1
}

// eachMember calls fn with the raw key (no quotes) and the value's bounds of
// each member of the JSON object at b[i], until fn returns false. It reports
// false if the object is not well formed as far as it looked (the frame
// reader balanced its braces and strings; scalars are not checked).
func eachMember(b []byte, i int, fn func(key []byte, vs, ve int) bool) bool {
	return eachItem(b, i, '}', func(i int) (int, bool, bool) {
		if b[i] != '"' {
			return 0, false, false
		}
		ke := stringEnd(b, i)
		if ke > len(b) {
			return 0, false, false
		}
		colon := skipSpace(b, ke)
		if colon >= len(b) || b[colon] != ':' {
			return 0, false, false
		}
		vs := skipSpace(b, colon+1)
		ve, ok := valueEnd(b, vs)
		return ve, ok && fn(b[i+1:ke-1], vs, ve), ok
	})
}

// eachElement calls fn with the bounds of each element of the JSON array at
// b[i], until fn returns false; false if it is not well formed.
func eachElement(b []byte, i int, fn func(es, ee int) bool) bool {
	return eachItem(b, i, ']', func(i int) (int, bool, bool) {
		ee, ok := valueEnd(b, i)
		return ee, ok && fn(i, ee), ok
	})
}

// eachItem walks the comma-separated items of the object or array opening
// at b[i] and closing with closer: item reads the one at i and says where it
// ends, whether to go on, and whether it was well formed.
func eachItem(b []byte, i int, closer byte, item func(i int) (end int, goOn, ok bool)) bool {
	i = skipSpace(b, i+1) // past the opener
	if i < len(b) && b[i] == closer {
		return true
	}
	for i < len(b) {
		end, goOn, ok := item(i)
		if !ok {
			return false
		}
		if !goOn {
			return true
		}
		i = skipSpace(b, end)
		switch {
		case i < len(b) && b[i] == closer:
			return true
		case i < len(b) && b[i] == ',':
			i = skipSpace(b, i+1)
		default:
			return false
		}
	}
	return false
}

// valueEnd is the index just past the JSON value at b[i]; false if it runs
// off the end or does not start like a value.
func valueEnd(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch b[i] {
	case '"':
		e := stringEnd(b, i)
		return e, e <= len(b)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = stringEnd(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, true
				}
			}
		}
		return i, false
	case ',', '}', ']', ':':
		return i, false
	}
	for j := i; j < len(b); j++ { // a number, true, false or null
		switch b[j] {
		case ',', '}', ']', ' ', '\n', '\r', '\t':
			return j, j > i
		}
	}
	return len(b), len(b) > i
}

// stringEnd is the index just past the JSON string starting at b[i] ('"'),
// or len(b)+1 if it does not end. A quote ends it unless an odd number of
// backslashes stands right before it.
func stringEnd(b []byte, i int) int {
	for i++; i < len(b); {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			break
		}
		q := i + j
		n := 0
		for k := q - 1; k >= i && b[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		i = q + 1
	}
	return len(b) + 1
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}
