package codec

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"rawwatch/watcher"
)

// Wire is the encoding to ask the server for (--wire).
type Wire string

const (
	// WireJSON is the default, and what every kube-apiserver serves.
	WireJSON Wire = "json"
	// WireCBOR asks for CBOR (KEP-4222): LIST pages as application/cbor and
	// WATCH streams as application/cbor-seq. kube-apiserver serves custom
	// resources so only with its alpha feature gate CBORServingAndStorage on
	// (off by default in 1.37); a server without it answers JSON, and the
	// watcher goes on with JSON for good, with one log line.
	WireCBOR Wire = "cbor"
)

// ParseWire reads a --wire flag: "json" (or "") or "cbor".
func ParseWire(s string) (Wire, error) {
	switch Wire(s) {
	case "", WireJSON:
		return WireJSON, nil
	case WireCBOR:
		return WireCBOR, nil
	}
	return "", fmt.Errorf("unknown wire %q: want json or cbor", s)
}

// AcceptCBOR is the Accept header of a CBOR request: CBOR preferred, JSON
// accepted (client-go's dynamic client sends the same with ClientsAllowCBOR),
// so that a server without CBOR answers JSON instead of 406.
const AcceptCBOR = "application/cbor;q=1, application/json;q=0.9"

// An AcceptSource is a Source whose requests can carry an Accept header of
// the caller's choosing: what CBOR needs (watcher.RESTSource is one).
type AcceptSource interface {
	watcher.Source
	// WithAccept returns a Source asking for these media types.
	WithAccept(accept string) watcher.Source
}

// NewCBOR sets up CBOR over src: a Source whose requests ask for CBOR, and
// a Codec that decodes CBOR answers (objects of gvk, if set) and JSON ones
// with json. A server that answers a CBOR request with 406 Not Acceptable
// or with JSON makes both use JSON from then on, with one log line. ok is
// false when src cannot ask (it is no AcceptSource): then src and json come
// back as they were.
func NewCBOR[T watcher.Object](src watcher.Source, gvk schema.GroupVersionKind, json watcher.Codec[T]) (_ watcher.Source, _ watcher.Codec[T], ok bool) {
	as, ok := src.(AcceptSource)
	if !ok {
		return src, json, false
	}
	n := &negotiation{json: src, cbor: as.WithAccept(AcceptCBOR), log: klog.Background()}
	return n, &cborCodec[T]{n: n, gvk: gvk, json: json}, true
}

// negotiation is the Source of NewCBOR: it asks for CBOR until the server
// shows it serves none.
type negotiation struct {
	json, cbor watcher.Source
	off        atomic.Bool // fallen back to JSON
	once       sync.Once
	mu         sync.Mutex
	log        logr.Logger // the last request's
}

func (n *negotiation) List(ctx context.Context, opts metav1.ListOptions) (io.ReadCloser, error) {
	return n.open(ctx, func(s watcher.Source) (io.ReadCloser, error) { return s.List(ctx, opts) })
}

func (n *negotiation) Watch(ctx context.Context, opts metav1.ListOptions) (io.ReadCloser, error) {
	return n.open(ctx, func(s watcher.Source) (io.ReadCloser, error) { return s.Watch(ctx, opts) })
}

// open makes a request, with CBOR while it is on: a 406 Not Acceptable
// falls back to JSON and asks again at once.
func (n *negotiation) open(ctx context.Context, do func(watcher.Source) (io.ReadCloser, error)) (io.ReadCloser, error) {
	n.mu.Lock()
	n.log = klog.FromContext(ctx)
	n.mu.Unlock()
	if !n.off.Load() {
		body, err := do(n.cbor)
		if !apierrors.IsNotAcceptable(err) {
			return body, err
		}
		n.fallBack("406 Not Acceptable")
	}
	return do(n.json)
}

// fallBack gives up CBOR for good, saying why once.
func (n *negotiation) fallBack(why string) {
	n.off.Store(true)
	n.once.Do(func() {
		n.mu.Lock()
		log := n.log
		n.mu.Unlock()
		log.Info("The server does not serve CBOR (is its CBORServingAndStorage feature gate off?): using JSON from now on", "reason", why)
	})
}

// sniff tells whether body is CBOR, as asked, or JSON: a kube-apiserver's
// CBOR starts with the self-described CBOR tag (0xd9d9f7), JSON with '{' or
// white space. A JSON answer to a CBOR request falls back to JSON. It reads
// (and buffers) the first byte, so for a WATCH it waits for the first frame.
func (n *negotiation) sniff(body io.Reader) (r io.Reader, isCBOR bool) {
	if n.off.Load() {
		return body, false
	}
	br := bufio.NewReaderSize(body, 16) // reads of more bypass its buffer
	b, err := br.Peek(1)
	if err != nil { // nothing came: the decoder reports it
		return br, true
	}
	if b[0] == selfDescribedCBOR[0] {
		return br, true
	}
	n.fallBack(fmt.Sprintf("the server answered a CBOR request with %q…, not CBOR", b[0]))
	return br, false
}

// cborCodec is NewCBOR's Codec: CBOR or JSON, as the server answered.
type cborCodec[T watcher.Object] struct {
	n    *negotiation
	gvk  schema.GroupVersionKind
	json watcher.Codec[T]
}

func (c *cborCodec[T]) DecodeList(r io.Reader, add func(T), bad func(*watcher.SkipError)) (metav1.ListMeta, error) {
	r, isCBOR := c.n.sniff(r)
	if isCBOR {
		return decodeCBORList(r, c.gvk, add, bad)
	}
	return c.json.DecodeList(r, add, bad)
}

// DecodeEvents looks at the stream's first byte on the first Next (not
// before, so that the loop's watchdog covers the wait).
func (c *cborCodec[T]) DecodeEvents(r io.Reader) watcher.Events[T] {
	if c.n.off.Load() {
		return c.json.DecodeEvents(r)
	}
	return &sniffingEvents[T]{c: c, body: r}
}

type sniffingEvents[T watcher.Object] struct {
	c    *cborCodec[T]
	body io.Reader
	dec  watcher.Events[T]
}

func (s *sniffingEvents[T]) Next() (watcher.Event[T], error) {
	if s.dec == nil {
		r, isCBOR := s.c.n.sniff(s.body)
		if isCBOR {
			s.dec = newCBOREventDecoder[T](r, s.c.gvk, 0)
		} else {
			s.dec = s.c.json.DecodeEvents(r)
		}
	}
	return s.dec.Next()
}
