// Package client is a typed client for MyResource, written out by hand: what
// client-gen would generate for one type, small enough to read in a minute.
//
// It is a thin layer over a client-go REST client configured for
// example.com/v1alpha1. The watcher does not use these methods (it reads raw
// LIST and WATCH bodies through REST()); the reconciler, the tests and the
// load generators do.
package client

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"

	"rawwatch/api/v1alpha1"
)

// Scheme knows the MyResource types (and the meta/v1 types every API has).
var Scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(v1alpha1.AddToScheme(Scheme))
}

// Client reads and writes MyResources.
type Client struct{ rest rest.Interface }

// New returns a client for example.com/v1alpha1 using cfg's server and credentials.
func New(cfg *rest.Config) (*Client, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &v1alpha1.SchemeGroupVersion
	c.APIPath = "/apis"
	c.ContentType = runtime.ContentTypeJSON
	// CBOR too, for a caller whose AcceptContentTypes asks for it (client-go
	// sends it only with its ClientsAllowCBOR feature gate on).
	c.NegotiatedSerializer = serializer.NewCodecFactory(Scheme, serializer.WithSerializer(cbor.NewSerializerInfo)).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, err
	}
	return &Client{rest: rc}, nil
}

// REST is the underlying REST client, for raw requests.
func (c *Client) REST() rest.Interface { return c.rest }

func (c *Client) Get(ctx context.Context, namespace, name string) (*v1alpha1.MyResource, error) {
	out := &v1alpha1.MyResource{}
	err := c.rest.Get().Namespace(namespace).Resource(v1alpha1.Resource).Name(name).Do(ctx).Into(out)
	return out, err
}

// List lists one namespace ("" for all) with the given options.
func (c *Client) List(ctx context.Context, namespace string, opts metav1.ListOptions) (*v1alpha1.MyResourceList, error) {
	out := &v1alpha1.MyResourceList{}
	err := c.rest.Get().Namespace(namespace).Resource(v1alpha1.Resource).
		VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
	return out, err
}

func (c *Client) Create(ctx context.Context, obj *v1alpha1.MyResource) (*v1alpha1.MyResource, error) {
	out := &v1alpha1.MyResource{}
	err := c.rest.Post().Namespace(obj.Namespace).Resource(v1alpha1.Resource).Body(obj).Do(ctx).Into(out)
	return out, err
}

// Update replaces the object (spec and metadata; status is ignored by the server).
func (c *Client) Update(ctx context.Context, obj *v1alpha1.MyResource) (*v1alpha1.MyResource, error) {
	out := &v1alpha1.MyResource{}
	err := c.rest.Put().Namespace(obj.Namespace).Resource(v1alpha1.Resource).Name(obj.Name).
		Body(obj).Do(ctx).Into(out)
	return out, err
}

// UpdateStatus replaces the status through the /status subresource. The
// object's resourceVersion makes it conditional: a stale one gets 409 Conflict.
func (c *Client) UpdateStatus(ctx context.Context, obj *v1alpha1.MyResource) (*v1alpha1.MyResource, error) {
	out := &v1alpha1.MyResource{}
	err := c.rest.Put().Namespace(obj.Namespace).Resource(v1alpha1.Resource).Name(obj.Name).
		SubResource("status").Body(obj).Do(ctx).Into(out)
	return out, err
}

func (c *Client) Delete(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error {
	return c.rest.Delete().Namespace(namespace).Resource(v1alpha1.Resource).Name(name).
		Body(&opts).Do(ctx).Error()
}

// Apply applies cfg (a MyResource as JSON) with server-side apply, as
// fieldManager, taking over conflicting fields (force).
func (c *Client) Apply(ctx context.Context, namespace, name, fieldManager string, cfg []byte) (*v1alpha1.MyResource, error) {
	out := &v1alpha1.MyResource{}
	err := c.rest.Patch(types.ApplyPatchType).Namespace(namespace).Resource(v1alpha1.Resource).Name(name).
		Param("fieldManager", fieldManager).Param("force", "true").Body(cfg).Do(ctx).Into(out)
	return out, err
}

// Patch changes the object with a patch of type pt (a merge patch, say).
func (c *Client) Patch(ctx context.Context, namespace, name string, pt types.PatchType, data []byte) (*v1alpha1.MyResource, error) {
	out := &v1alpha1.MyResource{}
	err := c.rest.Patch(pt).Namespace(namespace).Resource(v1alpha1.Resource).Name(name).Body(data).Do(ctx).Into(out)
	return out, err
}
