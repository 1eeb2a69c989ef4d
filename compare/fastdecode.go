package compare

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	"k8s.io/client-go/rest"

	"rawwatch/api/v1alpha1"
	"rawwatch/client"
	"rawwatch/codec/metajson"
)

// newInformerClient is the informer's REST client: client.New's, or with
// fast its JSON decoder tried MyResource's own decoder first (fastJSON).
func newInformerClient(cfg *rest.Config, fast bool) (rest.Interface, error) {
	if !fast {
		c, err := client.New(cfg)
		if err != nil {
			return nil, err
		}
		return c.REST(), nil
	}
	// client.New's settings, with the negotiated serializer wrapped.
	cfg = rest.CopyConfig(cfg)
	cfg.GroupVersion, cfg.APIPath, cfg.ContentType = &v1alpha1.SchemeGroupVersion, "/apis", runtime.ContentTypeJSON
	cfg.NegotiatedSerializer = newFastNegotiator()
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(cfg)
}

// fastNegotiator is client.New's negotiated serializer (without
// conversion) whose JSON serializer is fastJSON; the watch stream's
// envelope (StreamSerializer) is decoded as before.
type fastNegotiator struct {
	runtime.NegotiatedSerializer
	infos []runtime.SerializerInfo
}

func newFastNegotiator() fastNegotiator {
	ns := serializer.NewCodecFactory(client.Scheme, serializer.WithSerializer(cbor.NewSerializerInfo)).WithoutConversion()
	infos := append([]runtime.SerializerInfo(nil), ns.SupportedMediaTypes()...)
	for i := range infos {
		if infos[i].MediaType == runtime.ContentTypeJSON {
			infos[i].Serializer = fastJSON{infos[i].Serializer}
		}
	}
	return fastNegotiator{ns, infos}
}

func (f fastNegotiator) SupportedMediaTypes() []runtime.SerializerInfo { return f.infos }

// fastJSON decodes a MyResource with its own decoder (as the raw watcher's
// watch path does: managedFields reduced to the newest write, which
// informer-fastdecode's transform drops anyway) and anything else, or what
// that decoder declines, with the generic JSON serializer it wraps (a LIST
// page, decoded with no object to decode into, is scanned once before it
// goes there: it is no MyResource).
type fastJSON struct{ runtime.Serializer }

func (s fastJSON) Decode(data []byte, def *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	if o, ok := into.(*v1alpha1.MyResource); into == nil || ok {
		r := new(v1alpha1.MyResource)
		if r.DecodeJSON(data, metajson.Options{NewestWriteOnly: true}) == nil && r.GroupVersionKind() == v1alpha1.GroupVersionKind {
			if o != nil {
				*o, r = *r, o
			}
			gvk := v1alpha1.GroupVersionKind
			return r, &gvk, nil
		}
	}
	return s.Serializer.Decode(data, def, into)
}
