package codec

import (
	"bytes"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"rawwatch/api/v1alpha1"
	"rawwatch/watcher"
)

// A LIST page's items are of the list's type: client-go decodes a page into
// MyResourceList and takes every item as a MyResource, whether it carries
// apiVersion and kind or not (kube-apiserver leaves them out of the items
// of built-in types, and an aggregated API server of its own). Both codecs
// keep such an item, as client-go does.
func TestAListItemWithoutApiVersionAndKindIsKeptAsClientGoKeepsIt(t *testing.T) {
	body := []byte(`{"apiVersion":"example.com/v1alpha1","kind":"MyResourceList","metadata":{"resourceVersion":"10"},` +
		`"items":[{"metadata":{"name":"a","namespace":"ns","uid":"u-a","resourceVersion":"4"},"spec":{"message":"hi"}}]}`)

	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	dec, err := runtime.NewClientNegotiator(serializer.NewCodecFactory(scheme).WithoutConversion(), v1alpha1.SchemeGroupVersion).Decoder("application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	var list v1alpha1.MyResourceList
	if _, _, err := dec.Decode(body, nil, &list); err != nil || len(list.Items) != 1 || list.Items[0].Spec.Message != "hi" {
		t.Fatalf("client-go's decoding: %v, %d items; want the item", err, len(list.Items))
	}

	for name, c := range map[string]watcher.Codec[*v1alpha1.MyResource]{"codec.JSON": codec, "watcher.JSONCodec": plainCodec} {
		var got []*v1alpha1.MyResource
		var skipped []string
		_, err := c.DecodeList(bytes.NewReader(body), func(o *v1alpha1.MyResource) { got = append(got, o) },
			func(s *watcher.SkipError) { skipped = append(skipped, s.Error()) })
		if err != nil || len(got) != 1 {
			t.Errorf("%s: %d items (error %v), skipped %q; client-go keeps the item", name, len(got), err, skipped)
			continue
		}
		if gvk := got[0].GroupVersionKind(); gvk != v1alpha1.GroupVersionKind {
			t.Errorf("%s: the item is of %v, want the list's type %v", name, gvk, v1alpha1.GroupVersionKind)
		}
	}
}

// An item that names another apiVersion or kind than the list's is still
// skipped (only one that names neither is taken for the list's type).
func TestAListItemOfAnotherKindIsSkipped(t *testing.T) {
	for _, head := range []string{`"apiVersion":"v1","kind":"Pod",`, `"kind":"MyResource",`, `"apiVersion":"example.com/v1alpha1",`} {
		body := []byte(`{"apiVersion":"example.com/v1alpha1","kind":"MyResourceList","metadata":{"resourceVersion":"10"},` +
			`"items":[{` + head + `"metadata":{"name":"a","namespace":"ns","uid":"u-a","resourceVersion":"4"}}]}`)
		for name, c := range map[string]watcher.Codec[*v1alpha1.MyResource]{"codec.JSON": codec, "watcher.JSONCodec": plainCodec} {
			var got, skipped int
			_, err := c.DecodeList(bytes.NewReader(body), func(*v1alpha1.MyResource) { got++ }, func(*watcher.SkipError) { skipped++ })
			if err != nil || got != 0 || skipped != 1 {
				t.Errorf("%s, an item with %s: %d kept, %d skipped (error %v); want it skipped", name, head, got, skipped, err)
			}
		}
	}
}
