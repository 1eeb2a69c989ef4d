package watcher

import (
	"context"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// Source is the watcher's only window on the API server: two GETs, each
// answering with a body for the Codec.
//
//	LIST   GET /apis/GROUP/VERSION/[namespaces/NS/]RESOURCE?limit=500&resourceVersion=...
//	WATCH  GET ...RESOURCE?watch=true&resourceVersion=RV&allowWatchBookmarks=true&timeoutSeconds=...
//
// A failed request returns an error apierrors understands (a StatusError
// for any HTTP status).
type Source interface {
	List(ctx context.Context, opts metav1.ListOptions) (io.ReadCloser, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (io.ReadCloser, error)
}

// RESTSource is a Source backed by a client-go REST client for the resource's
// group and version. It never retries: retrying is the loop's job.
type RESTSource struct {
	Client   rest.Interface
	Resource string
	// Namespace limits the source to one namespace; "" means all namespaces.
	Namespace string
	// Accept, if set, is every request's Accept header; default the client's.
	Accept string
}

func (s RESTSource) List(ctx context.Context, opts metav1.ListOptions) (io.ReadCloser, error) {
	opts.Watch = false
	return s.request(opts).Stream(ctx)
}

func (s RESTSource) Watch(ctx context.Context, opts metav1.ListOptions) (io.ReadCloser, error) {
	opts.Watch = true
	return s.request(opts).Stream(ctx)
}

func (s RESTSource) request(opts metav1.ListOptions) *rest.Request {
	r := s.Client.Get().
		Namespace(s.Namespace).
		Resource(s.Resource).
		VersionedParams(&opts, metav1.ParameterCodec).
		MaxRetries(0)
	if s.Accept != "" {
		r.SetHeader("Accept", s.Accept)
	}
	return r
}

// WithAccept returns s asking for these media types (package codec's CBOR
// asks so).
func (s RESTSource) WithAccept(accept string) Source {
	s.Accept = accept
	return s
}
