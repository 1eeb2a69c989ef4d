// Package kuberef decodes a MyResource, a LIST page and an ERROR's object
// as Kubernetes' own decoding does (client-go and apimachinery), for the
// tests that hold the watcher's codecs to it: sigs.k8s.io/json for the
// bytes, the JSON serializer's reading of apiVersion and kind, the dynamic
// client's scheme for an ERROR.
package kuberef

import (
	"encoding/json"
	"errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/types"
	kjson "sigs.k8s.io/json"

	"rawwatch/api/v1alpha1"
	"rawwatch/store"
)

// Identity is what a refused object's metadata says of it.
type Identity struct {
	Key, RV string
	UID     types.UID
}

// IdentityOf reads an object's metadata as a map through Kubernetes'
// decoder: each of name, namespace, resourceVersion and UID the last value
// given for it, if a string.
func IdentityOf(object []byte) Identity {
	var id struct {
		Metadata map[string]any `json:"metadata"`
	}
	_ = kjson.UnmarshalCaseSensitivePreserveInts(object, &id)
	var out Identity
	name, _ := id.Metadata["name"].(string)
	ns, isString := id.Metadata["namespace"].(string)
	if name != "" && (isString || id.Metadata["namespace"] == nil) {
		out.Key = store.Key(ns, name)
	}
	out.RV, _ = id.Metadata["resourceVersion"].(string)
	u, _ := id.Metadata["uid"].(string)
	out.UID = types.UID(u)
	return out
}

// Object decodes raw as a MyResource through sigs.k8s.io/json, refusing
// null and any object that does not name a MyResource (NamesMyResource).
func Object(raw []byte, listItem bool) (*v1alpha1.MyResource, error) {
	var obj *v1alpha1.MyResource
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &obj); err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, errors.New("object is null")
	}
	if !NamesMyResource(raw, obj, listItem) {
		return nil, errors.New("another kind")
	}
	return obj, nil
}

// NamesMyResource tells whether an object (raw, decoded into obj) names a
// MyResource both as client-go's serializer finds its apiVersion and kind
// (any case) and as it holds them (read case-sensitively); a list item
// that names neither either way is one (and is made to say so), as a
// typed list's decode takes it.
func NamesMyResource(raw []byte, obj *v1alpha1.MyResource, listItem bool) bool {
	found, err := kjsonserializer.DefaultMetaFactory.Interpret(raw)
	if err != nil {
		return false
	}
	if listItem && found.Empty() && obj.GroupVersionKind().Empty() {
		obj.SetGroupVersionKind(v1alpha1.GroupVersionKind)
		return true
	}
	return *found == v1alpha1.GroupVersionKind && obj.GroupVersionKind() == v1alpha1.GroupVersionKind
}

// List reads a LIST page as Kubernetes does, through sigs.k8s.io/json, then
// its items one by one: ok is false when Kubernetes refuses the page for
// anything but an item (not one JSON object, a member of the wrong type),
// or when it is no list at all (neither items nor a resourceVersion: the
// watcher's DecodeList's rule). An item Kubernetes cannot decode (it would
// fail the page) is skipped, with the identity its metadata gives.
func List(data []byte) (meta metav1.ListMeta, items []*v1alpha1.MyResource, skipped []Identity, ok bool) {
	var l struct {
		Metadata metav1.ListMeta   `json:"metadata"`
		Items    []json.RawMessage `json:"items"`
	}
	var members map[string]json.RawMessage
	if kjson.UnmarshalCaseSensitivePreserveInts(data, &l) != nil || kjson.UnmarshalCaseSensitivePreserveInts(data, &members) != nil || members == nil {
		return meta, nil, nil, false
	}
	if _, listed := members["items"]; !listed && l.Metadata.ResourceVersion == "" {
		return meta, nil, nil, false
	}
	for _, raw := range l.Items {
		obj, err := Object(raw, true)
		if err != nil {
			skipped = append(skipped, IdentityOf(raw))
			continue
		}
		items = append(items, obj)
	}
	return l.Metadata, items, skipped, true
}

// DynamicObjects decodes an object as client-go's dynamic client decodes
// a watch event's (dynamic/scheme.go: the JSON serializer over meta/v1's
// types, Status among them unversioned, so a Status of any apiVersion is a
// *metav1.Status; any other kind unstructured).
var DynamicObjects = func() runtime.Decoder {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return kjsonserializer.NewSerializerWithOptions(kjsonserializer.DefaultMetaFactory, unstructuredCreater{s}, s, kjsonserializer.SerializerOptions{})
}()

// unstructuredCreater is client-go/dynamic's: a kind its scheme knows as
// that type, any other unstructured.
type unstructuredCreater struct{ nested runtime.ObjectCreater }

func (c unstructuredCreater) New(kind schema.GroupVersionKind) (runtime.Object, error) {
	if out, err := c.nested.New(kind); err == nil {
		return out, nil
	}
	out := &unstructured.Unstructured{}
	out.GetObjectKind().SetGroupVersionKind(kind)
	return out, nil
}
