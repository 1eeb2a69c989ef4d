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

// A CBOR list item that does not decode is skipped with its UID, as on the
// JSON wire, so a relist replaces a stored object of another UID
// (store.Replacement.Keep) instead of keeping it as if current.
func TestACBORSkipCarriesTheItemsUID(t *testing.T) {
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

// A skip reads only the identity (name, namespace, resourceVersion, UID):
// one metadata field of the wrong type (generation a string) keeps the key
// and UID, so a relist keeps the same object and a garbled DELETED deletes it.
func TestASkipKeepsTheKeyOfAnObjectWithOneBadMetadataField(t *testing.T) {
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
