package codec

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	kjsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"

	"rawwatch/api/v1alpha1"
	"rawwatch/watcher"
)

// Both codecs, the fast one and the watcher's plain one, take an object
// only when its apiVersion and kind name a MyResource both as client-go's
// JSON serializer finds them (its MetaFactory: encoding/json's rules, keys
// matched in any case, of a key given twice the last) and as the object
// it decodes holds them (its own TypeMeta, read case-sensitively): an
// object handed out says what it is. So on every route an object takes: a
// LIST item, a watch frame's object read in one pass, and read apart.
func TestApiVersionAndKindNameAMyResourceBothWays(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	serializer := kjsonserializer.NewSerializerWithOptions(kjsonserializer.DefaultMetaFactory, scheme, scheme, kjsonserializer.SerializerOptions{})
	meta := `"metadata":{"name":"a","namespace":"ns","uid":"u-a","resourceVersion":"6"}`
	for name, object := range map[string]string{
		"as written":                `{` + objHead + `,` + meta + `}`,
		"KIND after kind":           `{` + objHead + `,"KIND":"Other",` + meta + `}`,
		"Kind before kind":          `{"Kind":"Other",` + objHead + `,` + meta + `}`,
		"ApiVersion after":          `{` + objHead + `,"ApiVersion":"example.com/v2",` + meta + `}`,
		"only in other cases":       `{"APIVERSION":"example.com/v1alpha1","Kind":"MyResource",` + meta + `}`,
		"empty, then ApiVersion":    `{"apiVersion":"","ApiVersion":"example.com/v1alpha1","kind":"MyResource",` + meta + `}`,
		"ApiVersion, then empty":    `{"ApiVersion":"example.com/v1alpha1","apiVersion":"","kind":"MyResource",` + meta + `}`,
		"KIND only, apiVersion":     `{"apiVersion":"example.com/v1alpha1","KIND":"MyResource",` + meta + `}`,
		"a Kelvin sign":             `{` + objHead + `,"` + "\u212A" + `ind":"Other",` + meta + `}`,
		"an escaped kind after":     `{` + objHead + `,"kin\u0064":"Other",` + meta + `}`,
		"an escaped KIND after":     `{` + objHead + `,"KIN\u0044":"Other",` + meta + `}`,
		"kind twice, the last good": `{"kind":"Other",` + objHead + `,` + meta + `}`,
	} {
		for cname, codec := range map[string]interface {
			Decode(what string, raw []byte) (*v1alpha1.MyResource, error)
			watcher.Codec[*v1alpha1.MyResource]
		}{"the fast codec": codec, "watcher.JSONCodec": plainCodec} {
			t.Run(cname+"/"+name, func(t *testing.T) {
				sobj, _, serr := serializer.Decode([]byte(object), nil, nil)
				if serr == nil && sobj.GetObjectKind().GroupVersionKind() != v1alpha1.GroupVersionKind {
					serr = errors.New("the object's own apiVersion and kind name no MyResource")
				}
				_, err := codec.Decode("list item", []byte(object))
				if (err == nil) != (serr == nil) {
					t.Errorf("Codec.Decode: %v; the serializer: %v", err, serr)
				}
				ev, err := codec.DecodeEvents(bytes.NewReader([]byte(framedEvent(watcher.Modified, object)))).Next()
				var skip *watcher.SkipError
				if (err == nil) != (serr == nil) || err != nil && !errors.As(err, &skip) {
					t.Errorf("the event decoder: %v (%v); the serializer: %v", err, ev.Object, serr)
				}
				if err == nil && !reflect.DeepEqual(ev.Object.ObjectMeta.Name, "a") {
					t.Errorf("the event's object: %v", ev.Object)
				}
			})
		}
	}
}
