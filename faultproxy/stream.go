package faultproxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// stream is one open WATCH passing through the proxy.
type stream struct {
	// ctx ends when the stream is cut or the client goes away.
	ctx    context.Context
	cancel context.CancelFunc
	// inject carries frames to add to the stream between two of the server's.
	inject chan injection
	// initialEvents: a WatchList (sendInitialEvents=true), whose first
	// frames are the initial state, up to the initial-events-end bookmark.
	initialEvents bool
	// ignoring: a WatchList passed on as a plain WATCH
	// (IgnoreSendInitialEvents); Heal cuts it.
	ignoring bool
	// stalled: nothing more passes, not even the end (StallWatches).
	stalled atomic.Bool
}

type injection struct {
	frame []byte
	// end: after this frame, end the stream cleanly, as the apiserver does
	// after an ERROR event.
	end bool
}

type streamKey struct{}

func newStream(ctx context.Context, cancel context.CancelFunc, initialEvents bool) *stream {
	return &stream{ctx: ctx, cancel: cancel, inject: make(chan injection, 16), initialEvents: initialEvents}
}

// frame wraps the server's response body so that it is passed on one JSON
// line (one watch event) at a time, with injected frames in between.
func (s *stream) frame(upstream io.ReadCloser, p *Proxy) io.ReadCloser {
	b := &framedBody{s: s, p: p, upstream: upstream, lines: make(chan []byte), done: make(chan struct{})}
	go b.pump()
	return b
}

// framedBody is what the reverse proxy copies to the client.
type framedBody struct {
	s        *stream
	p        *Proxy
	upstream io.ReadCloser
	lines    chan []byte // frames read from the server, each ending in '\n'
	err      error       // why lines was closed (set before the close)
	done     chan struct{}
	once     sync.Once

	pending []byte // the rest of the frame being handed out
	ending  bool   // return io.EOF once pending is out

	// What the persistent faults decided after a frame: end the stream with
	// this frame next (FlapError, WatchListFail), or cut it (FlapCut).
	next       []byte
	cut        bool
	initialEnd bool // the initial-events-end bookmark went by
}

// errCut ends a stream the proxy cut: the reverse proxy aborts the response.
var errCut = errors.New("faultproxy: watch stream cut")

// pump reads the server's frames until its body ends.
func (b *framedBody) pump() {
	r := bufio.NewReader(b.upstream)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			select {
			case b.lines <- line:
			case <-b.done:
				return
			}
		}
		if err != nil {
			b.err = err
			close(b.lines)
			return
		}
	}
}

func (b *framedBody) Read(out []byte) (int, error) {
	for len(b.pending) == 0 {
		if b.s.stalled.Load() { // nothing passes, not even the end
			<-b.s.ctx.Done()
			return 0, b.s.ctx.Err()
		}
		switch {
		case b.ending:
			return 0, io.EOF
		case b.cut:
			b.p.count.cut.Add(1)
			b.s.cancel()
			return 0, errCut
		case b.next != nil:
			if err := b.thawed(); err != nil {
				return 0, err
			}
			b.pending, b.ending, b.next = b.next, true, nil
			continue
		}
		select {
		case inj := <-b.s.inject:
			if b.s.stalled.Load() {
				continue
			}
			if err := b.thawed(); err != nil {
				return 0, err
			}
			b.pending, b.ending = inj.frame, inj.end
		case line, ok := <-b.lines:
			if b.s.stalled.Load() {
				continue
			}
			if !ok {
				if err := b.s.ctx.Err(); err != nil {
					// Cut: the upstream body may end cleanly or not, but
					// the client must see its stream broken.
					return 0, err
				}
				return 0, b.err // io.EOF when the server ended the stream
			}
			if b.p.dropping(line) {
				b.p.count.dropped.Add(1)
				continue
			}
			if err := b.thawed(); err != nil {
				return 0, err
			}
			if isGone(line) {
				b.p.count.upstreamGone.Add(1)
			}
			b.p.count.frames.Add(1)
			b.pending = b.p.garbled(line)
			b.persistentFaults(line)
		}
	}
	n := copy(out, b.pending)
	b.pending = b.pending[n:]
	return n, nil
}

// thawed holds the frame in hand while the proxy is frozen; an error means
// the stream ended meanwhile (the client gave up, or a cut).
func (b *framedBody) thawed() error {
	for {
		thaw := b.p.frozen()
		if thaw == nil {
			return nil
		}
		select {
		case <-thaw:
		case <-b.s.ctx.Done():
			return b.s.ctx.Err()
		}
	}
}

// persistentFaults decides, after a frame of the server's went out, what the
// persistent faults do next: FlapCut cuts the stream after any frame,
// FlapError ends it with a 500 after an event, WatchListFail after an initial
// event of a WatchList. Each bites at the first frame it sees, so switching
// one on reaches the streams already open.
func (b *framedBody) persistentFaults(line []byte) {
	p := b.p
	if p.flapCut.Load() {
		b.cut = true
		return
	}
	watchList := b.s.initialEvents && !b.initialEnd
	if watchList && bytes.Contains(line, []byte(metav1.InitialEventsAnnotationKey)) {
		b.initialEnd, watchList = true, false
	}
	if watchList && p.watchListEnd.Load() && isEvent(line) {
		b.ending = true // this frame, then a clean end: no bookmark ever
		return
	}
	if !p.flapError.Load() && !(watchList && p.watchListFail.Load()) {
		return
	}
	if isEvent(line) {
		b.next = InternalErrorEvent
		p.count.errorEvents.Add(1)
	}
}

func (b *framedBody) Close() error {
	b.once.Do(func() { close(b.done) })
	return b.upstream.Close()
}

// frameHead is the part of a watch frame the proxy looks at.
type frameHead struct {
	Type   string `json:"type"`
	Object struct {
		Code int `json:"code"`
	} `json:"object"`
}

func head(line []byte) (frameHead, bool) {
	var h frameHead
	err := json.Unmarshal(bytes.TrimSpace(line), &h)
	return h, err == nil
}

// isGone: an ERROR event carrying a 410 (the server's "too old resource version").
func isGone(line []byte) bool {
	if !bytes.Contains(line, []byte(`"ERROR"`)) {
		return false // the cheap test first: most frames are not errors
	}
	h, ok := head(line)
	return ok && h.Type == "ERROR" && h.Object.Code == 410
}

// Drop makes the proxy swallow, from every WATCH stream, the server's events
// of the given types ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"). With no
// types, it passes everything again. No client can notice a lost event; the
// next relist repairs it. Drop exists to show exactly that.
func (p *Proxy) Drop(types ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drop = map[string]bool{}
	for _, t := range types {
		p.drop[t] = true
	}
}

func (p *Proxy) dropping(line []byte) bool {
	p.mu.Lock()
	drop := p.drop // Drop replaces the map, never changes it
	p.mu.Unlock()
	if len(drop) == 0 {
		return false
	}
	h, ok := head(line)
	return ok && drop[h.Type]
}

// InjectFrame adds frame (one watch event's JSON) to every open WATCH stream,
// between two of the server's frames, and returns how many streams got it.
// The stream goes on afterwards.
func (p *Proxy) InjectFrame(frame []byte) int {
	return p.inject(injection{frame: line(frame)}, &p.count.injected)
}

// ExpireWatches ends every open WATCH stream the way the apiserver does when
// the resourceVersion a watch is at has been compacted away: an ERROR event
// with a 410 Expired Status, then the end of the stream. It returns how many
// streams it ended.
func (p *Proxy) ExpireWatches() int {
	return p.inject(injection{frame: ExpiredEvent, end: true}, &p.count.expired)
}

// ExpiredEvent is the ERROR frame ExpireWatches sends, worded as the
// apiserver words it.
var ExpiredEvent = line([]byte(`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},` +
	`"status":"Failure","message":"too old resource version (injected by faultproxy)","reason":"Expired","code":410}}`))

// InternalErrorEvent is the ERROR frame FlapError and WatchListFail end a
// stream with: a 500, as the apiserver sends when it cannot go on (etcd
// answered an error, an event came with no previous value).
var InternalErrorEvent = line([]byte(`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},` +
	`"status":"Failure","message":"Internal error occurred: injected by faultproxy","reason":"InternalError","code":500}}`))

// UndecodableEvent is a well-formed frame whose object does not decode as a
// MyResource: spec.message is a number. The watcher must skip it and go on.
var UndecodableEvent = line([]byte(`{"type":"MODIFIED","object":{"apiVersion":"example.com/v1alpha1","kind":"MyResource",` +
	`"metadata":{"name":"undecodable","namespace":"default","resourceVersion":"1"},"spec":{"message":17}}}`))

func (p *Proxy) inject(inj injection, counter interface{ Add(int64) int64 }) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for s := range p.streams {
		select {
		case s.inject <- inj:
			n++
		default: // a stream that is not being read; leave it
		}
	}
	counter.Add(int64(n))
	return n
}

// line returns frame ending in exactly one newline.
func line(frame []byte) []byte {
	return append(bytes.TrimRight(frame, "\n"), '\n')
}
