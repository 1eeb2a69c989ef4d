package codec

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"rawwatch/api/v1alpha1"
	"rawwatch/store"
	"rawwatch/watcher"
)

// Claim (issue 20, store.Replacement.Keep): an undecodable list item of
// another UID than the stored object's deletes the stored object. On the
// CBOR wire it does not: decodeCBOR's SkipError carries Key and RV but never
// the UID, so Keep gets "" ("unreadable: keep it") and the old object, gone
// from the server, stays in the store as if current, with no delta. JSON
// relists were fixed; CBOR relists (--wire=cbor) still behave as before the
// fix. Severity: wrong data (a deleted object kept as current until an event
// of the new one decodes). It fails with:
//
//	CBOR skip of default/a carries UID "", want "uid-new"
//	after a CBOR relist listed default/a undecodable under UID uid-new, the store
//	still holds UID uid-a and handed 0 deltas
//
// Fixed since: both wires finish a decode in Codec.checked.
func TestAdversaryCBORSkipLosesTheUID(t *testing.T) {
	st := store.New[*v1alpha1.MyResource]()
	old := sample("a", "3") // UID uid-a
	st.Upsert(old)
	bad := map[string]any{"apiVersion": "example.com/v1alpha1", "kind": "MyResource",
		"metadata": map[string]any{"name": "a", "namespace": "default", "resourceVersion": "9", "uid": "uid-new"},
		"spec":     []any{}} // not an object: does not decode
	page := cborOf(t, map[string]any{"apiVersion": "example.com/v1alpha1", "kind": "MyResourceList",
		"metadata": map[string]any{"resourceVersion": "20"}, "items": []any{bad}})
	repl := st.NewReplacement()
	var skips []*watcher.SkipError
	if _, err := decodeCBORList(bytes.NewReader(page), codec.GVK, repl.Add, func(s *watcher.SkipError) {
		skips = append(skips, s)
		repl.Keep(s.Key, s.UID) // as Watcher.list does
	}); err != nil {
		t.Fatal(err)
	}
	if len(skips) != 1 || skips[0].UID != "uid-new" {
		for _, s := range skips {
			t.Errorf("CBOR skip of %s carries UID %q, want %q", s.Key, s.UID, "uid-new")
		}
	}
	deltas := repl.Commit()
	if got, ok := st.Get("default/a"); ok && got.UID == old.UID {
		t.Errorf("after a CBOR relist listed default/a undecodable under UID uid-new, the store still holds UID %s and handed %d deltas", got.UID, len(deltas))
	}
}

// Claims (SkipError.UID, store.Replacement.Keep; docs/faults.md): "the
// same UID or an unreadable one keeps it", and "a garbled DELETED still
// deletes its key". Both need the skipped object's key, which Codec.decode
// reads only if the whole of typeAndMeta decodes: one field of the
// metadata of the wrong type (generation a string, a creationTimestamp
// that is not a time) loses name, namespace and UID together, though
// encoding/json read them. Then the relist cannot Keep the item (Watcher.list
// keeps only skips with a key), and the stored object, the same one, comes
// out watcher.Deleted (FinalStateUnknown) and leaves the store though the server
// has it; and such a DELETED is skipped without deleting its key (the
// object stays in the store until the next relist). Severity: loss (a
// spurious delete, and a delete never applied; the apiserver validates
// metadata, so only a mangling middlebox or a broken server sends such an
// object). It fails with:
//
//	a list item default/a (same UID) whose metadata.generation is a string:
//	skipped with key "" and UID "", want "default/a" and "uid-a"
//	the relist handed [watcher.Deleted default/a (final state unknown: true)] and the
//	store lost default/a, which the server lists
//	a DELETED event of default/a whose metadata.generation is a string:
//	skipped DELETED event: json: cannot unmarshal string into Go struct field
//	ObjectMeta.metadata.generation of type int64 (key ""), so the loop does
//	not delete it
//
// Fixed since: a skip reads only the identity (name, namespace, resourceVersion, UID).
func TestAdversaryOneBadMetadataFieldLosesTheSkippedObjectsKey(t *testing.T) {
	st := store.New[*v1alpha1.MyResource]()
	st.Upsert(sample("a", "3")) // UID uid-a
	item := `{` + objHead + `,"metadata":{"name":"a","namespace":"default","uid":"uid-a","resourceVersion":"4","generation":"2"},"spec":{"message":"x"}}`
	page := `{"apiVersion":"example.com/v1alpha1","kind":"MyResourceList","metadata":{"resourceVersion":"20"},"items":[` + item + `]}`
	repl := st.NewReplacement()
	if _, err := decodeList(strings.NewReader(page), codec, repl.Add, func(s *watcher.SkipError) {
		if s.Key != "default/a" || s.UID != "uid-a" {
			t.Errorf("a list item default/a (same UID) whose metadata.generation is a string: skipped with key %q and UID %q, want \"default/a\" and \"uid-a\"", s.Key, s.UID)
		}
		if s.Key != "" { // as Watcher.list does
			repl.Keep(s.Key, s.UID)
		}
	}); err != nil {
		t.Fatal(err)
	}
	deltas := repl.Commit()
	if _, ok := st.Get("default/a"); !ok {
		var ds []string
		for _, d := range deltas {
			ds = append(ds, fmt.Sprintf("%s %s (final state unknown: %v)", d.Type, d.Key, d.FinalStateUnknown))
		}
		t.Errorf("the relist handed %v and the store lost default/a, which the server lists", ds)
	}
	frame := `{"type":"DELETED","object":` + item + "}\n"
	_, err := newEventDecoder(strings.NewReader(frame), codec).Next()
	var skip *watcher.SkipError
	if !errors.As(err, &skip) || skip.Key != "default/a" {
		t.Errorf("a DELETED event of default/a whose metadata.generation is a string: %v (key %q), so the loop does not delete it", err, func() string {
			if skip != nil {
				return skip.Key
			}
			return "no skip"
		}())
	}
}
