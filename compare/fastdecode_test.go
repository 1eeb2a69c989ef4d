package compare

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"rawwatch/api/v1alpha1"
	"rawwatch/codec"
)

// informer-fastdecode's JSON serializer decodes the replayed objects with
// MyResource's own decoder (its generic one refuses everything here), as the
// generic one would but for managedFields, reduced to the newest write;
// into nil or into a MyResource alike.
func TestFastJSONDecodesMyResourcesWithTheirOwnDecoder(t *testing.T) {
	generic := newFastNegotiator().infos
	var plain runtime.Serializer
	for _, info := range generic {
		if info.MediaType == runtime.ContentTypeJSON {
			plain = info.Serializer.(fastJSON).Serializer
		}
	}
	fast := fastJSON{refusing{}}
	for _, rv := range []int{1, 2, 3} {
		data, err := json.Marshal(replayObject(7, rv, rv-1))
		if err != nil {
			t.Fatal(err)
		}
		want, _, err := plain.Decode(data, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, into := range []runtime.Object{nil, &v1alpha1.MyResource{Spec: v1alpha1.MyResourceSpec{Message: "stale"}}} {
			got, gvk, err := fast.Decode(data, nil, into)
			if err != nil {
				t.Fatalf("into %T: %v", into, err)
			}
			if into != nil && got != into {
				t.Errorf("decoded into %p, not into %p", got, into)
			}
			g, w := got.(*v1alpha1.MyResource).DeepCopy(), want.(*v1alpha1.MyResource).DeepCopy()
			if len(g.ManagedFields) != 1 || len(w.ManagedFields) != 3 || !g.ManagedFields[0].Time.Equal(w.ManagedFields[2].Time) {
				t.Errorf("managedFields %v, want the newest time of %v", g.ManagedFields, w.ManagedFields)
			}
			g.ManagedFields, w.ManagedFields = nil, nil
			if !reflect.DeepEqual(g, w) || *gvk != v1alpha1.GroupVersionKind || len(g.Status.Conditions) != 1 || len(g.OwnerReferences) != 2 {
				t.Errorf("into %T: fast decode differs:\n got %+v (%v)\nwant %+v", into, g, gvk, w)
			}
		}
	}
}

// Anything but a MyResource goes to the generic serializer.
func TestFastJSONLeavesOtherKindsToTheGenericSerializer(t *testing.T) {
	var fast runtime.Serializer
	for _, info := range newFastNegotiator().SupportedMediaTypes() {
		if info.MediaType == runtime.ContentTypeJSON {
			fast = info.Serializer
		}
	}
	status := []byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410}`)
	got, _, err := fast.Decode(status, nil, nil)
	if s, ok := got.(*metav1.Status); err != nil || !ok || s.Code != 410 {
		t.Errorf("a Status decoded as %T %+v, %v", got, got, err)
	}
	list := []byte(`{"kind":"MyResourceList","apiVersion":"example.com/v1alpha1","metadata":{"resourceVersion":"5"},"items":[]}`)
	got, _, err = fast.Decode(list, nil, nil)
	if l, ok := got.(*v1alpha1.MyResourceList); err != nil || !ok || l.ResourceVersion != "5" {
		t.Errorf("a list decoded as %T %+v, %v", got, got, err)
	}
}

// raw-generic's objects have no decoder of their own: the watcher decodes
// them the generic way, and raw's with MyResource's own.
func TestRawGenericHasNoDecoderOfItsOwn(t *testing.T) {
	if _, own := any(&genericResource{}).(codec.JSONDecoder); own {
		t.Error("genericResource has a decoder of its own")
	}
	if _, own := any(&v1alpha1.MyResource{}).(codec.JSONDecoder); !own {
		t.Error("MyResource has no decoder of its own")
	}
}

type refusing struct{ runtime.Serializer }

func (refusing) Decode([]byte, *schema.GroupVersionKind, runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	return nil, nil, errors.New("the generic serializer was asked")
}
