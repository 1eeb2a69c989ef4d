package watcher

import (
	"bufio"
	"context"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rawwatch/internal/metajson"
)

// Wire is the encoding the watcher asks the server for (Options.Wire).
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
// the caller's choosing: what Options.Wire needs (RESTSource is one).
type AcceptSource interface {
	Source
	// WithAccept returns a Source asking for these media types.
	WithAccept(accept string) Source
}

// WithAccept returns s asking for accept (AcceptSource).
func (s RESTSource) WithAccept(accept string) Source {
	s.Accept = accept
	return s
}

// encoding is the watcher's choice of encoding: the CBOR source while CBOR is
// in use (nil with JSON, from the start or after a fallback).
type encoding struct {
	cbor Source
}

// newEncoding sets up Options.Wire over src.
func newEncoding(src Source, w Wire) encoding {
	if w != WireCBOR {
		return encoding{}
	}
	if as, ok := src.(AcceptSource); ok {
		return encoding{cbor: as.WithAccept(AcceptCBOR)}
	}
	return encoding{} // cannot ask: JSON (Run says so)
}

// fallBack gives up CBOR for good, saying why once.
func (w *Watcher[T]) fallBack(why string) {
	if w.wire.cbor == nil {
		return
	}
	w.wire.cbor = nil
	w.log.Info("The server does not serve CBOR (is its CBORServingAndStorage feature gate off?): using JSON from now on", "reason", why)
}

// open makes a LIST (watch false) or WATCH request in the wire's encoding:
// with CBOR, a 406 Not Acceptable falls back to JSON and asks again at once.
func (w *Watcher[T]) open(ctx context.Context, opts metav1.ListOptions, watch bool) (io.ReadCloser, error) {
	do := func(s Source) (io.ReadCloser, error) {
		if watch {
			return s.Watch(ctx, opts)
		}
		return s.List(ctx, opts)
	}
	if s := w.wire.cbor; s != nil {
		body, err := do(s)
		if !apierrors.IsNotAcceptable(err) {
			return body, err
		}
		w.fallBack("406 Not Acceptable")
	}
	return do(w.source)
}

// sniff tells whether body is CBOR, as asked, or JSON: a kube-apiserver's
// CBOR starts with the self-described CBOR tag (0xd9d9f7), JSON with '{' or
// white space. A JSON answer to a CBOR request falls back to JSON. It reads
// (and buffers) the first byte, so for a WATCH it waits for the first frame.
func (w *Watcher[T]) sniff(body io.Reader) (r io.Reader, isCBOR bool) {
	if w.wire.cbor == nil {
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
	w.fallBack(fmt.Sprintf("the server answered a CBOR request with %q…, not CBOR", b[0]))
	return br, false
}

// readList reads one LIST page in the wire's encoding: see decodeList.
func (w *Watcher[T]) readList(ctx context.Context, opts metav1.ListOptions, add func(T), bad func(*SkipError)) (metav1.ListMeta, error) {
	body, err := w.open(ctx, opts, false)
	if err != nil {
		return metav1.ListMeta{}, err
	}
	defer body.Close()
	r, isCBOR := w.sniff(body)
	if isCBOR {
		return decodeCBORList(r, w.opts.Codec, add, bad)
	}
	return decodeList(r, w.codec(), add, bad)
}

// events is a stream of watch events (eventDecoder, cborEventDecoder).
type events[T Object] interface {
	Next() (Event[T], error)
}

// newEvents reads a WATCH body in the encoding the server answered with.
// With CBOR it waits for the first frame to tell.
func (w *Watcher[T]) newEvents(body io.Reader) events[T] {
	if w.wire.cbor == nil {
		return newEventDecoder(body, w.codec())
	}
	return &sniffingEvents[T]{w: w, body: body}
}

// sniffingEvents looks at a WATCH body's first byte on the first Next (not
// before, so that the loop's watchdog covers the wait), then decodes it.
type sniffingEvents[T Object] struct {
	w    *Watcher[T]
	body io.Reader
	dec  events[T]
}

func (s *sniffingEvents[T]) Next() (Event[T], error) {
	if s.dec == nil {
		r, isCBOR := s.w.sniff(s.body)
		if isCBOR {
			s.dec = newCBOREventDecoder(r, s.w.opts.Codec, 0)
		} else {
			s.dec = newEventDecoder(r, s.w.codec())
		}
	}
	return s.dec.Next()
}

// codec is the Codec for one JSON LIST page or WATCH stream. When the store
// shares label maps (store.SharesLabels: Share, and no transform that may
// change labels in place), its objects whose labels are written alike, one
// after another, get one map (metajson.LabelCache: the objects of a stream
// or a page mostly carry the same labels, and the store would drop an equal
// map for the one it holds); otherwise each gets its own.
func (w *Watcher[T]) codec() Codec[T] {
	c := w.opts.Codec
	if w.store.SharesLabels() {
		c.labels = new(metajson.LabelCache)
	}
	return c
}
