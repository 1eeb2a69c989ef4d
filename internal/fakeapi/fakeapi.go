// Package fakeapi is an in-memory API server for one resource (MyResource),
// deterministic enough to run a watcher against in virtual time
// (testing/synctest) and to misbehave on command. It speaks the wire format
// the watcher reads — LIST pages with continue tokens, WATCH streams of
// newline-separated JSON frames, bookmarks, WatchList's initial events — and
// keeps the rules of kube-apiserver that matter to a client:
//
//   - the resourceVersion is global, as etcd's revision is: every change of
//     the resource gets the next one, and so does every write to another
//     resource (WriteOther: a Lease renewal), which sends no event but moves
//     every list's resourceVersion and every bookmark's;
//   - every object carries managedFields, as kube-apiserver records them:
//     two managers (the creator's entry, the updater's), each with the time
//     of its last write, to the second;
//   - Compact forgets history: a WATCH from an older resourceVersion gets an
//     ERROR 410 frame, a continue token of an older snapshot a 410 response;
//     LosePrevKv compacts at a deletion: without the watch cache, a WATCH
//     from just before it gets an ERROR 500 "PrevKv=nil", every time;
//   - a WATCH from a resourceVersion the server has not reached (what an etcd
//     restore leads to) is accepted and silent until the server gets there,
//     as kube-apiserver's watch cache does (FutureWatchFails: a 504 "Too
//     large resource version" instead); a LIST gets the 504;
//   - every stream ends cleanly at its timeoutSeconds (EarlyEnd: a little
//     before), and, if BookmarkEvery is set, sends a bookmark carrying the
//     server's resourceVersion that often and 2 s before it ends, as the
//     watch cache does (kube-apiserver's cacheWatcher.nextBookmarkTime: a
//     minute); without a watch cache kube-apiserver sends none.
//
// WatchCache makes it answer the way kube-apiserver's watch cache does:
//
//   - a LIST with resourceVersion "0" is served from the cache, whole
//     (limit ignored, no continue token), from the state the cache held
//     CacheLag ago (a cache behind etcd: another apiserver's, in an HA
//     control plane); "" is a consistent read of the latest data, paginated;
//   - a WATCH is served from the cache's history, which starts where the
//     cache last started (RestartCache): an older resourceVersion gets the
//     ERROR 410 "too old resource version", whatever etcd compacted; a
//     WATCH from "0" first sends the cache's state as ADDED events.
//
// Where it differs from kube-apiserver: the cache's lag applies to "0" LISTs
// only (its WATCHes see every change at once); a cache that did not restart
// serves every resourceVersion since it started (kube-apiserver's also
// drops history of a busy resource); continue pages always come from the
// snapshot of their first page (as etcd serves them); EarlyEnd stands for a
// proxy between client and server (kube-apiserver counts timeoutSeconds
// from when it received the request, so a client never sees its stream end
// early), the slack the watcher's rule for a healthy stream allows for.
//
// In virtual time it is deterministic: the server acts on a timer of its
// own (a slow frame, a stream's bookmark or timeout, a request's latency)
// only after all else due at that instant (settle), and a stream with
// several things due at once takes them in a fixed order (see stream.run),
// never as a select picks among ready cases.
//
// Faults (SetFault) stay on until changed; Cut, Compact, LosePrevKv,
// RestartCache, Restart (the apiserver's, answering as a starting one for
// a while) and Restore act once. Every request is logged (Requests),
// with the status (and Retry-After) it was refused with, when and how a
// stream ended, the event an ERROR followed, the first event sent
// corrupted or cut (and whether the client read past the cut), so a test
// can hold the client to a request budget, a Retry-After, and what must
// follow a failure.
package fakeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"rawwatch/api/v1alpha1"
)

// Mode is a persistent fault.
type Mode int

const (
	// Healthy: no fault.
	Healthy Mode = iota
	// CutAfterFirstFrame: every stream breaks (unexpected EOF) right after
	// its first frame, event or bookmark: a flapping proxy.
	CutAfterFirstFrame
	// ErrorAfterFirstEvent: every stream sends one frame (the next change,
	// if there is one; else a bookmark where it starts), then an ERROR 500.
	ErrorAfterFirstEvent
	// Freeze: streams open and then send nothing; the connection stays up.
	Freeze
	// Refuse: every request fails to connect.
	Refuse
	// Fail500: every request is answered 500.
	Fail500
	// Throttle: every request is answered 429 with Retry-After.
	Throttle
	// WatchGone: every WATCH is answered 410 Gone.
	WatchGone
	// WatchListFails: a WatchList stream sends an ERROR 500 during its
	// initial events (kube-apiserver does, when etcd cannot report
	// progress); LIST and plain WATCH work.
	WatchListFails
	// ContinueExpires: every continue token is refused as expired.
	ContinueExpires
	// SlowFrames: every frame waits a second before it is sent.
	SlowFrames
	// EveryOtherListFails: every second LIST request is answered 500: a
	// paginated list meets an outage between any two of its pages.
	EveryOtherListFails
	// Garble: every DELETED event carries a final state the client cannot
	// decode (a field of another type: a newer schema), its name, namespace
	// and UID intact (in turn its spec, then its resourceVersion, a number),
	// and every event follows a frame of an unknown type; so do the list
	// items (LIST pages, a WatchList's initial events) that
	// Server.GarbleItem picks.
	Garble
	// CutFrames: every event frame (ADDED, MODIFIED, DELETED, a WatchList's
	// initial events too) is cut short and ends in a newline, not JSON:
	// a middlebox mangling the stream (the fault proxy's garble). By its
	// resourceVersion, in turn: in half, inside a string (after a key's
	// colon and the value's opening quote), or after a key's colon (the
	// next frame would parse as the value). A stream whose request is odd
	// sends its first event whole: the stream is line-framed before a cut.
	CutFrames
	// CorruptFrames: every event frame has one bit flipped: the T of its
	// object's creationTimestamp becomes a backslash, an escape JSON does
	// not have: a link or a middlebox corrupting a byte that TCP's
	// checksum let through. The frame keeps its shape (the frame reader
	// leaves escapes to the decoder); its JSON is broken.
	CorruptFrames
	// Respell: every frame and LIST page is written as no kube-apiserver
	// writes it, but as Kubernetes' decoding (metav1.WatchEvent and the
	// object through sigs.k8s.io/json) reads it the same: keys and strings
	// with escapes, members reordered and spaced, members Kubernetes
	// ignores (keys in another case, after the real ones: "Type", "Object",
	// a metadata's "ResourceVersion", a page's "Continue"), a "type" given
	// twice (the last counts), an "object":null after the object (it
	// keeps the object), an ERROR's Status without "status", a page whose
	// "items" come twice (the last array counts; the first holds an
	// object the server does not have). See respell.
	Respell
	nModes
)

// Modes is every persistent fault, Healthy first.
func Modes() []Mode {
	var ms []Mode
	for m := range nModes {
		ms = append(ms, m)
	}
	return ms
}

func (m Mode) String() string {
	return [...]string{"healthy", "cut-after-first-frame", "error-after-first-event", "freeze", "refuse",
		"500", "429", "watch-410", "watch-list-fails", "continue-expires", "slow-frames", "every-other-list-fails", "garble", "cut-frames", "corrupt-frames", "respell"}[m]
}

// Request is one request the server answered.
type Request struct {
	At time.Time
	// Kind is "LIST", "WATCH" or "WATCHLIST" (a WATCH with sendInitialEvents).
	Kind string
	// RV is the resourceVersion asked for; Continue marks a continue page;
	// Limit is a LIST's page size.
	RV       string
	Continue bool
	Limit    int64
	// Code is the HTTP status the request was refused with (429, 500,
	// 410, ...; 0: it was answered); Refused: the connection was refused.
	Code    int
	Refused bool
	// RetryAfter is the Retry-After the refusal carried; Starting: the
	// server refused it as a starting apiserver does (Restart).
	RetryAfter time.Duration
	Starting   bool
	// For a WATCH: the timeoutSeconds it asked for; when the stream ended
	// (zero while it is open); whether the client closed it (rather than
	// the server, at its timeout, a fault or an ERROR frame); and Gone, if
	// it was answered 410 (a response or an ERROR frame).
	Timeout        time.Duration
	Ended          time.Time
	ClosedByClient bool
	Gone           bool
	// Corrupted: the resourceVersion of the first event the stream sent
	// corrupted (CorruptFrames) and the client read; "" if none.
	Corrupted string
	// Cut: the resourceVersion of the first event the stream sent cut
	// (CutFrames) and the client read; CutInString: the cut is inside a
	// string (the newline after it is a raw control byte JSON forbids);
	// CutLined: a whole frame and its newline came before it on the
	// stream; ReadAfterCut: the client read a frame written after it.
	Cut                                 string
	CutInString, CutLined, ReadAfterCut bool
	// ErrorAfter: the resourceVersion of the event the stream's ERROR
	// frame followed (ErrorAfterFirstEvent), once the client read both;
	// "" if none did.
	ErrorAfter string
}

// Server is the fake. Create it with New.
type Server struct {
	// Wrote, if set, hears every Put: the resourceVersion it wrote and the
	// time it stamped (to the second), before any stream or list can see
	// the write (it runs under the server's lock: it must not call the
	// server).
	Wrote func(rv string, at time.Time)
	// BookmarkEvery is the bookmark cadence of every stream; 0: no
	// bookmarks (kube-apiserver without its watch cache).
	BookmarkEvery time.Duration
	// WatchCache serves "0" LISTs and WATCHes as kube-apiserver's watch
	// cache does (see the package doc); CacheLag is how far behind etcd the
	// cache's "0" LISTs are.
	WatchCache bool
	CacheLag   time.Duration
	// EarlyEnd: every stream ends cleanly this fraction of its
	// timeoutSeconds early (a proxy's clock; see the package doc).
	EarlyEnd float64
	// RetryAfter is the Retry-After of the Throttle fault, in seconds.
	RetryAfter int
	// Latency delays every answer (a network round trip).
	Latency time.Duration
	// FutureWatchFails: a WATCH from a resourceVersion the server has not
	// reached gets 504 "Too large resource version" (as a LIST does). By
	// default it is accepted and sends nothing until the server gets there,
	// as kube-apiserver's watch cache does.
	FutureWatchFails bool
	// GarbleItem picks, under the Garble fault, the list items served
	// undecodable (nil: none). It is called with the server's lock held.
	GarbleItem func(*v1alpha1.MyResource) bool

	mu        sync.Mutex
	rv        int64
	objs      map[string]*v1alpha1.MyResource
	history   []change
	compacted int64
	// prevKvLost: the resourceVersion of a DELETED whose previous state
	// etcd compacted (LosePrevKv); 0: none.
	prevKvLost int64
	// cacheStart: the watch cache's history starts after this
	// resourceVersion; cached holds its states, oldest first (WatchCache).
	cacheStart int64
	cached     []cacheState
	wake       chan struct{}
	uids       int
	mode       Mode
	lists      int // LIST requests answered, for EveryOtherListFails
	snaps      map[int]*listSnap
	nextSnap   int
	streams    map[*stream]struct{}
	requests   []Request
	// A restart (Restart): until pathsAt every request gets 503, until
	// readyAt every WATCH 429; cacheBegun: the watch cache's history began.
	pathsAt, readyAt time.Time
	cacheBegun       bool
}

type change struct {
	rv  int64
	typ string
	obj *v1alpha1.MyResource
}

// cacheState is the data at a resourceVersion, and when it was reached.
type cacheState struct {
	at    time.Time
	rv    int64
	items []*v1alpha1.MyResource
}

type listSnap struct {
	rv    int64
	items []*v1alpha1.MyResource
}

// New returns an empty server at resourceVersion 1.
func New() *Server {
	s := &Server{BookmarkEvery: time.Minute, RetryAfter: 2, rv: 1,
		objs: map[string]*v1alpha1.MyResource{}, wake: make(chan struct{}),
		snaps: map[int]*listSnap{}, streams: map[*stream]struct{}{}}
	s.cacheLocked()
	return s
}

// SetFault switches the persistent fault (Healthy heals).
func (s *Server) SetFault(m Mode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mode = m
}

// Fault is the persistent fault on now.
func (s *Server) Fault() Mode {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mode
}

// Requests returns every request so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// ResourceVersion is the server's current resourceVersion.
func (s *Server) ResourceVersion() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strconv.FormatInt(s.rv, 10)
}

// Objects returns copies of every object, by key.
func (s *Server) Objects() map[string]*v1alpha1.MyResource {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]*v1alpha1.MyResource, len(s.objs))
	for k, o := range s.objs {
		out[k] = o.DeepCopy()
	}
	return out
}

// Put creates namespace/name (with a new UID) or updates it with message.
func (s *Server) Put(namespace, name, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := namespace + "/" + name
	typ := "MODIFIED"
	obj, ok := s.objs[key]
	now := metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	if ok {
		obj = obj.DeepCopy()
		obj.Generation++
		// The updater's entry says when it last wrote.
		i := slices.IndexFunc(obj.ManagedFields, func(e metav1.ManagedFieldsEntry) bool { return e.Manager == updater.Manager })
		if i < 0 {
			obj.ManagedFields, i = append(obj.ManagedFields, *updater.DeepCopy()), len(obj.ManagedFields)
		}
		obj.ManagedFields[i].Time = &now
	} else {
		typ = "ADDED"
		s.uids++
		obj = &v1alpha1.MyResource{
			TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "MyResource"},
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID(fmt.Sprintf("uid-%d", s.uids)), Generation: 1,
				CreationTimestamp: now, Labels: map[string]string{"app": "explorer"},
				ManagedFields: []metav1.ManagedFieldsEntry{*creator.DeepCopy(), *updater.DeepCopy()}},
		}
		for i := range obj.ManagedFields {
			obj.ManagedFields[i].Time = &now
		}
	}
	obj.Spec.Message = message
	s.commitLocked(typ, key, obj)
	if s.Wrote != nil {
		s.Wrote(obj.ResourceVersion, now.Time)
	}
}

// creator and updater are the field managers of every object, as
// kube-apiserver records them: the one that created it (its labels) and the
// one that writes its spec. Each entry's time is its manager's last write,
// to the second: the newest is when the object was last written.
var creator, updater = metav1.ManagedFieldsEntry{
	Manager: "kubectl-create", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: v1alpha1.SchemeGroupVersion.String(),
	FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{".":{},"f:app":{}}}}`)},
}, metav1.ManagedFieldsEntry{
	Manager: "explorer", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: v1alpha1.SchemeGroupVersion.String(),
	FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:message":{}}}`)},
}

// Delete deletes namespace/name, if it exists.
func (s *Server) Delete(namespace, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := namespace + "/" + name
	if obj, ok := s.objs[key]; ok {
		s.commitLocked("DELETED", key, obj.DeepCopy())
	}
}

func (s *Server) commitLocked(typ, key string, obj *v1alpha1.MyResource) {
	s.rv++
	obj.ResourceVersion = strconv.FormatInt(s.rv, 10)
	if typ == "DELETED" {
		delete(s.objs, key)
	} else {
		s.objs[key] = obj
	}
	s.history = append(s.history, change{rv: s.rv, typ: typ, obj: obj})
	s.cacheLocked()
	s.wakeLocked()
}

// WriteOther is a write to another resource (a Lease renewal, an Event):
// the global resourceVersion moves on, and this resource sees no event.
func (s *Server) WriteOther() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv++
}

// cacheLocked records the data as it is now, for the watch cache's "0"
// LISTs, and forgets the states no LIST can be served from any more.
func (s *Server) cacheLocked() {
	s.cached = append(s.cached, cacheState{at: time.Now(), rv: s.rv, items: s.sortedLocked()})
	s.cachedLocked()
}

// cachedLocked is what the watch cache serves a "0" LIST or WATCH: the
// newest state at least CacheLag old (the oldest kept, if none is, as
// after a restart).
func (s *Server) cachedLocked() cacheState {
	i, horizon := 0, time.Now().Add(-s.CacheLag)
	for i+1 < len(s.cached) && !s.cached[i+1].at.After(horizon) {
		i++
	}
	s.cached = s.cached[i:]
	return s.cached[0]
}

// RestartCache restarts the watch cache: it lists the latest data and its
// history starts there, so that a WATCH from an older resourceVersion gets
// 410 "too old resource version". With endStreams, every stream ends
// cleanly now, as kube-apiserver's cacher ends all its watchers when it
// re-initialises; without, the streams stay open: another apiserver of an
// HA control plane restarted, and a client meets it at its next request.
func (s *Server) RestartCache(endStreams bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cacheStart = s.rv
	s.cached = nil
	s.cacheLocked()
	if endStreams {
		for st := range s.streams {
			st.stop()
		}
	}
}

func (s *Server) wakeLocked() {
	close(s.wake)
	s.wake = make(chan struct{})
}

// Compact forgets the history up to the current resourceVersion, as etcd's
// compaction does: older WATCHes and continue tokens get 410s.
func (s *Server) Compact() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compacted, s.prevKvLost = s.rv, 0
}

// LosePrevKv compacts etcd at the last change, which must be a DELETED
// (it does nothing otherwise): the object's state before its deletion is
// gone. Without the watch cache, kube-apiserver's etcd watch asks for
// every event's previous state, and a WATCH from the resourceVersion just
// before the deletion is answered with an ERROR 500 "etcd event received
// with PrevKv=nil", every time (older ones get 410, as after Compact); the
// watch cache, which keeps its own history, is not affected.
func (s *Server) LosePrevKv() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.history); n > 0 && s.history[n-1].rv == s.rv && s.history[n-1].typ == "DELETED" {
		s.compacted, s.prevKvLost = s.rv-1, s.rv
	}
}

// Cut breaks every open stream now.
func (s *Server) Cut() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for st := range s.streams {
		st.kill()
	}
}

// State is a saved copy of the server's data, for Restore.
type State struct {
	rv      int64
	objs    map[string]*v1alpha1.MyResource
	history int
}

// ResourceVersion is the resourceVersion of the saved data.
func (st State) ResourceVersion() string { return strconv.FormatInt(st.rv, 10) }

// Save copies the data, as an etcd snapshot does.
func (s *Server) Save() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	objs := make(map[string]*v1alpha1.MyResource, len(s.objs))
	for k, o := range s.objs {
		objs[k] = o
	}
	return State{rv: s.rv, objs: objs, history: len(s.history)}
}

// Restore puts a saved copy back and restarts (every stream breaks). With
// bump 0 the resourceVersion goes back in time, as after a plain etcd
// restore; with bump > 0 it jumps forward by bump and everything before is
// compacted, as after etcd's documented restore for Kubernetes
// (etcdutl snapshot restore --bump-revision --mark-compacted), which makes
// every watcher's next WATCH a 410.
func (s *Server) Restore(st State, bump int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv, s.objs = st.rv, make(map[string]*v1alpha1.MyResource, len(st.objs))
	for k, o := range st.objs {
		s.objs[k] = o
	}
	s.history = s.history[:st.history]
	s.compacted, s.prevKvLost = min(s.compacted, s.rv), 0
	if bump > 0 {
		s.rv += bump
		s.compacted = s.rv
	}
	s.cacheStart = s.rv // the restarted apiserver's cache starts here
	s.cached = nil
	s.snaps = map[int]*listSnap{} // and it knows no continue token
	s.cacheLocked()
	for st := range s.streams {
		st.kill()
	}
	s.wakeLocked()
}

// Restart restarts kube-apiserver on the same etcd: every stream breaks,
// and it answers as a starting kube-apiserver does. For paths every request
// gets 503 "the request has been made before all known HTTP paths have been
// installed"; then, with WatchCache, for cache the watch cache initializes:
// every WATCH gets 429 "storage is (re)initializing" with Retry-After 1 s,
// LISTs are served from etcd (kube-apiserver's
// ResilientWatchCacheInitialization), and the cache's history begins where
// it began initializing, so a WATCH from an older resourceVersion gets 410
// once it is ready.
func (s *Server) Restart(paths, cache time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.pathsAt, s.readyAt, s.cacheBegun = now.Add(paths), now.Add(paths), false
	if s.WatchCache {
		s.readyAt = s.readyAt.Add(cache)
	}
	for st := range s.streams {
		st.kill()
	}
}

// startingLocked is the answer of a starting server (Restart) to request
// req, if it is still starting; watch: req is a WATCH.
func (s *Server) startingLocked(req int, watch bool) error {
	if s.pathsAt.IsZero() {
		return nil
	}
	now := time.Now()
	var err error
	if now.Before(s.pathsAt) {
		err = apierrors.NewServiceUnavailable("the request has been made before all known HTTP paths have been installed, please try again")
	} else {
		if s.WatchCache && !s.cacheBegun {
			// The cache began initializing once the paths were installed
			// (here: at the first request since, which no client can tell
			// from earlier).
			s.cacheBegun, s.cacheStart, s.cached = true, s.rv, nil
			s.cacheLocked()
		}
		if watch && now.Before(s.readyAt) {
			err = apierrors.NewTooManyRequests("storage is (re)initializing", 1)
		}
	}
	if err == nil {
		return nil
	}
	s.requests[req].Starting = true
	return s.refusedLocked(req, err)
}

// Watch implements watcher.Source.
func (s *Server) Watch(ctx context.Context, opts metav1.ListOptions) (io.ReadCloser, error) {
	s.roundTrip(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	initial := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	kind := "WATCH"
	if initial {
		kind = "WATCHLIST"
	}
	timeout := 30 * time.Minute
	if opts.TimeoutSeconds != nil {
		timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
	}
	s.requests = append(s.requests, Request{At: time.Now(), Kind: kind, RV: opts.ResourceVersion, Timeout: timeout})
	req := len(s.requests) - 1
	refused := func(err error) (io.ReadCloser, error) {
		s.requests[req].Ended, s.requests[req].Gone = time.Now(), apierrors.IsGone(err)
		return nil, s.refusedLocked(req, err)
	}
	if err := s.failLocked(); err != nil {
		return refused(err)
	}
	if err := s.startingLocked(req, true); err != nil {
		s.requests[req].Ended = time.Now()
		return nil, err
	}
	if s.mode == WatchGone {
		return refused(apierrors.NewGone("the watch is gone (fault)"))
	}
	st := &stream{s: s, req: req, mode: s.mode, initial: initial, done: make(chan struct{}), killed: make(chan struct{}), stopped: make(chan struct{})}
	from, err := s.parseRV(opts.ResourceVersion)
	oldest := s.compacted // the oldest resourceVersion a WATCH can start from
	if s.WatchCache {
		oldest = s.cacheStart
	}
	switch {
	case err != nil:
		return refused(apierrors.NewBadRequest(err.Error()))
	case initial:
		st.snapshot = s.sortedLocked()
		from = s.rv
	case from == 0 && s.WatchCache && opts.ResourceVersion == "0":
		// The cache's state first, as ADDED events, then what follows it.
		c := s.cachedLocked()
		st.snapshot, st.initial, st.unmarked = c.items, true, true
		from = c.rv
	case from == 0:
		from = s.rv
	case from > s.rv && s.FutureWatchFails:
		return refused(tooLarge(from, s.rv))
	case from < oldest:
		st.expired = fmt.Sprintf("too old resource version: %d (%d)", from, oldest)
		s.requests[req].Gone = true
	case !s.WatchCache && s.prevKvLost != 0 && from == s.prevKvLost-1:
		st.prevKvLost = fmt.Sprintf("etcd event received with PrevKv=nil (modRevision=%d, type=DELETE)", s.prevKvLost)
	}
	st.cursor = from
	pr, pw := io.Pipe()
	st.pw = pw
	s.streams[st] = struct{}{}
	go st.run(ctx, timeout-time.Duration(s.EarlyEnd*float64(timeout)))
	return &body{PipeReader: pr, st: st}, nil
}

// List implements watcher.Source.
func (s *Server) List(ctx context.Context, opts metav1.ListOptions) (io.ReadCloser, error) {
	s.roundTrip(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, Request{At: time.Now(), Kind: "LIST", RV: opts.ResourceVersion, Continue: opts.Continue != "", Limit: opts.Limit})
	req := len(s.requests) - 1
	if err := s.failLocked(); err != nil {
		return nil, s.refusedLocked(req, err)
	}
	if err := s.startingLocked(req, false); err != nil {
		return nil, err
	}
	if s.lists++; s.mode == EveryOtherListFails && s.lists%2 == 0 {
		return nil, s.refusedLocked(req, apierrors.NewInternalError(errors.New("every other LIST fails (fault)")))
	}
	garble := func(*v1alpha1.MyResource) bool { return false }
	if s.mode == Garble && s.GarbleItem != nil {
		garble = s.GarbleItem
	}
	respelled := s.mode == Respell
	var snap *listSnap
	id, offset := 0, 0
	if opts.Continue != "" {
		if _, err := fmt.Sscanf(opts.Continue, "%d:%d", &id, &offset); err != nil {
			return nil, s.refusedLocked(req, apierrors.NewBadRequest("bad continue token"))
		}
		snap = s.snaps[id]
		if snap == nil || snap.rv < s.compacted || s.mode == ContinueExpires {
			return nil, s.refusedLocked(req, apierrors.NewResourceExpired("The provided continue parameter is too old to display a consistent list result."))
		}
	} else {
		if rv, err := s.parseRV(opts.ResourceVersion); err != nil {
			return nil, s.refusedLocked(req, apierrors.NewBadRequest(err.Error()))
		} else if rv > s.rv {
			return nil, s.refusedLocked(req, tooLarge(rv, s.rv))
		}
		if s.WatchCache && opts.ResourceVersion == "0" {
			// From the watch cache: whole, whatever the limit, and as old
			// as the cache is.
			c := s.cachedLocked()
			return listBody(c.rv, c.items, "", garble, respelled)
		}
		s.nextSnap++
		id, snap = s.nextSnap, &listSnap{rv: s.rv, items: s.sortedLocked()}
		s.snaps[id] = snap
	}
	end := len(snap.items)
	if opts.Limit > 0 {
		end = min(end, offset+int(opts.Limit))
	}
	cont := ""
	if end < len(snap.items) {
		cont = fmt.Sprintf("%d:%d", id, end)
	} else {
		delete(s.snaps, id)
	}
	return listBody(snap.rv, snap.items[offset:end], cont, garble, respelled)
}

// refusedLocked records in the log why request req was refused, and
// returns err.
func (s *Server) refusedLocked(req int, err error) error {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		s.requests[req].Code = int(status.Status().Code)
		if d, ok := apierrors.SuggestsClientDelay(err); ok {
			s.requests[req].RetryAfter = time.Duration(d) * time.Second
		}
	} else {
		s.requests[req].Refused = true
	}
	return err
}

// listBody is a LIST page of items, those garble picks undecodable; with
// respelled, as Respell writes it.
func listBody(rv int64, items []*v1alpha1.MyResource, cont string, garble func(*v1alpha1.MyResource) bool, respelled bool) (io.ReadCloser, error) {
	list := struct {
		metav1.TypeMeta `json:",inline"`
		metav1.ListMeta `json:"metadata"`
		Items           []any `json:"items"`
	}{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "MyResourceList"}}
	list.ResourceVersion = strconv.FormatInt(rv, 10)
	list.Continue = cont
	list.Items = []any{}
	for i, o := range items {
		if garble(o) {
			list.Items = append(list.Items, garbledObject(o, i))
		} else {
			list.Items = append(list.Items, o)
		}
	}
	raw, err := json.Marshal(list)
	if err != nil {
		return nil, err
	}
	if respelled {
		raw = respellPage(raw, rv)
	}
	return io.NopCloser(bytes.NewReader(raw)), nil
}

func (s *Server) roundTrip(ctx context.Context) {
	if s.Latency > 0 {
		t := time.NewTimer(s.Latency)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		settle()
	}
}

func (s *Server) parseRV(rv string) (int64, error) {
	if rv == "" {
		return 0, nil
	}
	return strconv.ParseInt(rv, 10, 64)
}

func (s *Server) sortedLocked() []*v1alpha1.MyResource {
	keys := make([]string, 0, len(s.objs))
	for k := range s.objs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]*v1alpha1.MyResource, len(keys))
	for i, k := range keys {
		out[i] = s.objs[k]
	}
	return out
}

// failLocked answers a request the way the persistent fault says, if it does.
func (s *Server) failLocked() error {
	switch s.mode {
	case Refuse:
		return &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	case Fail500:
		return apierrors.NewInternalError(errors.New("the server is broken (fault)"))
	case Throttle:
		return apierrors.NewTooManyRequests("slow down (fault)", s.RetryAfter)
	}
	return nil
}

func tooLarge(asked, have int64) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: 504, Reason: metav1.StatusReasonTimeout,
		Message: fmt.Sprintf("Too large resource version: %d, current: %d", asked, have),
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge,
			Message: "Too large resource version"}}},
	}}
}

// stream is one open WATCH.
type stream struct {
	s    *Server
	req  int // its index in s.requests
	mode Mode
	// initial: the snapshot goes first, as ADDED events, then (unless
	// unmarked: a WATCH from "0") the bookmark that ends them.
	initial, unmarked bool
	snapshot          []*v1alpha1.MyResource
	cursor            int64
	expired           string
	prevKvLost        string
	pw                *io.PipeWriter
	frames            int
	whole             bool          // a whole frame was sent (CutFrames)
	eventRV           int64         // the event ErrorAfterFirstEvent sends (0: a bookmark)
	done              chan struct{} // the client closed the body
	killed            chan struct{} // Cut or Restore: the connection breaks
	stopped           chan struct{} // RestartCache: the server ends it cleanly
	killOnce          sync.Once
	doneOnce          sync.Once
	stopOnce          sync.Once
}

func (st *stream) kill() { st.killOnce.Do(func() { close(st.killed) }) }
func (st *stream) stop() { st.stopOnce.Do(func() { close(st.stopped) }) }

type body struct {
	*io.PipeReader
	st *stream
}

func (b *body) Close() error {
	b.st.doneOnce.Do(func() {
		b.st.ended(true)
		close(b.st.done)
	})
	return b.PipeReader.Close()
}

// ended records when and by whom the stream ended, the first time.
func (st *stream) ended(byClient bool) {
	st.s.mu.Lock()
	defer st.s.mu.Unlock()
	if r := &st.s.requests[st.req]; r.Ended.IsZero() {
		r.Ended, r.ClosedByClient = time.Now(), byClient
	}
}

var (
	errCut   = errors.New("fault: stream cut")
	errEnded = errors.New("the server ended the stream after an ERROR frame")
)

// nextBookmark is when the stream's next bookmark is due, as
// kube-apiserver's cacheWatcher.nextBookmarkTime has it: BookmarkEvery
// from now, or 2 s before the stream ends if that is sooner; none once
// that is past.
func (st *stream) nextBookmark(now, deadline time.Time) (time.Time, bool) {
	if st.s.BookmarkEvery <= 0 {
		return time.Time{}, false
	}
	at := now.Add(st.s.BookmarkEvery)
	if pre := deadline.Add(-2 * time.Second); pre.Before(at) {
		at = pre
	}
	return at, at.After(now)
}

// run writes the stream's frames until it ends (after timeout); the pipe
// carries them to the client, one write per frame.
func (st *stream) run(ctx context.Context, timeout time.Duration) {
	s := st.s
	defer func() {
		s.mu.Lock()
		delete(s.streams, st)
		s.mu.Unlock()
	}()
	end := func(err error) {
		if errors.Is(err, errEnded) {
			err = nil // a clean end after the ERROR frame
		}
		st.ended(false) // before the client can see the end
		st.pw.CloseWithError(err)
	}
	endAt := time.Now().Add(timeout)
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	bookmarks := time.NewTimer(0)
	bookmarks.Stop()
	defer bookmarks.Stop()
	var bookmarkAt time.Time // when the next bookmark is due (zero: none)
	scheduleBookmark := func() {
		var ok bool
		if bookmarkAt, ok = st.nextBookmark(time.Now(), endAt); ok {
			bookmarks.Reset(time.Until(bookmarkAt))
		} else {
			bookmarkAt = time.Time{}
		}
	}
	// gone ends the stream if its connection broke or its client left, the
	// first of them in that order.
	gone := func() bool {
		switch {
		case closed(st.killed):
			end(errCut)
		case closed(st.done):
		case ctx.Err() != nil:
			st.ended(true) // the client gave up on the request
			end(ctx.Err())
		default:
			return false
		}
		return true
	}

	// A flapping proxy's first frame comes from the server: one behind the
	// stream's resourceVersion (restored to older data) sends none, and
	// the stream waits in silence, as a frozen one does.
	s.mu.Lock()
	behind := s.rv < st.cursor
	s.mu.Unlock()
	if st.mode == Freeze || behind && (st.mode == CutAfterFirstFrame || st.mode == ErrorAfterFirstEvent) && !st.initial {
		select {
		case <-ctx.Done():
		case <-st.done:
		case <-st.killed:
		case <-st.stopped:
		}
		settle()
		if !gone() {
			end(nil) // the cache restarted
		}
		return
	}
	if st.prevKvLost != "" {
		st.ended(false)
		st.send(ctx, errorFrame(500, metav1.StatusReasonInternalError, st.prevKvLost))
		end(nil)
		return
	}
	if st.expired != "" {
		st.ended(false) // the server ends it: before the client can see the ERROR
		st.send(ctx, errorFrame(410, metav1.StatusReasonExpired, st.expired))
		end(nil)
		return
	}
	if st.initial {
		// The initial events, then the bookmark that ends them; with the
		// WatchListFails fault, an ERROR half-way.
		for i := 0; i <= len(st.snapshot); i++ {
			f := bookmark(st.cursor, true)
			switch {
			case st.mode == WatchListFails && !st.unmarked && i == len(st.snapshot)/2:
				st.ended(false)
				f = errorFrame(500, metav1.StatusReasonInternalError, "etcd does not support RequestWatchProgress (fault)")
			case i < len(st.snapshot) && st.mode == Garble && s.garbleItem(st.snapshot[i]):
				f = garbled("ADDED", st.snapshot[i])
			case i < len(st.snapshot):
				f = frame("ADDED", st.snapshot[i])
			case st.unmarked:
				continue
			}
			if err := st.send(ctx, f); err != nil {
				end(err)
				return
			}
			if st.mode == WatchListFails && !st.unmarked && i == len(st.snapshot)/2 {
				end(nil)
				return
			}
		}
	}
	if st.mode == CutAfterFirstFrame || st.mode == ErrorAfterFirstEvent {
		// A flapping proxy: one frame at once, then the fault. The frame is
		// a bookmark at the stream's start; under ErrorAfterFirstEvent it is
		// the next change, if there is one: the stream carries the client
		// past its resourceVersion before the ERROR.
		f := bookmark(st.cursor, false)
		if st.mode == ErrorAfterFirstEvent {
			s.mu.Lock()
			for _, c := range s.history {
				if c.rv > st.cursor {
					f, st.eventRV = frame(c.typ, c.obj), c.rv
					break
				}
			}
			s.mu.Unlock()
		}
		if err := st.send(ctx, f); err != nil {
			end(err)
			return
		}
	}
	scheduleBookmark()
	// Whatever woke the stream, it acts on what is due in a fixed order: the
	// connection broken, the client gone, the changes, a cache restart, the
	// bookmark, the timeout. Several are often due at once (a burst of slow
	// frames outlasts the bookmark timer, the timeout, a cache restart), and
	// a select picks among ready cases at random: in virtual time that made
	// a seed replay two ways (the explorer's seed 21: a bookmark before or
	// after the last changes; seed 1448: a bookmark before the end, or the
	// end at once; seed 1497: the end at a cache restart, or a bookmark and
	// one more change first).
	settled := false // since the stream last waited or sent
	for {
		if gone() {
			return
		}
		s.mu.Lock()
		var pending []change
		for _, c := range s.history {
			if c.rv > st.cursor {
				pending = append(pending, c)
			}
		}
		wake := s.wake
		s.mu.Unlock()
		for _, c := range pending {
			f := frame(c.typ, c.obj)
			if st.mode == Garble {
				if err := st.send(ctx, unknownFrame); err != nil {
					end(err)
					return
				}
				if c.typ == "DELETED" {
					f = garbled(c.typ, c.obj)
				}
			}
			if err := st.send(ctx, f); err != nil {
				end(err)
				return
			}
			st.cursor = c.rv
		}
		if len(pending) > 0 {
			settled = false
			continue // changes first: more may have come meanwhile
		}
		if !settled {
			settle()
			settled = true
			continue // a write at this very instant goes first
		}
		now := time.Now()
		switch {
		case closed(st.stopped):
			end(nil) // the cache restarted: a clean end, before the timeout
			return
		case !bookmarkAt.IsZero() && !now.Before(bookmarkAt):
			// Due before the timeout (2 s before it at the latest), so sent
			// before the end.
			scheduleBookmark()
			s.mu.Lock()
			rv := s.rv
			caughtUp := len(s.history) == 0 || s.history[len(s.history)-1].rv <= st.cursor
			s.mu.Unlock()
			if rv < st.cursor {
				continue // behind the watch's resourceVersion: nothing to say
			}
			if caughtUp {
				// The server's resourceVersion, moved by writes to
				// other resources too.
				st.cursor = rv
			}
			if err := st.send(ctx, bookmark(st.cursor, false)); err != nil {
				end(err)
				return
			}
			settled = false
			continue
		case !now.Before(endAt):
			end(nil) // timeoutSeconds: a normal end
			return
		}
		select {
		case <-ctx.Done():
		case <-st.done:
		case <-st.killed:
		case <-st.stopped:
		case <-wake:
		case <-deadline.C:
		case <-bookmarks.C:
		}
		settled = false
	}
}

// settle lets everything else due at this instant happen first. Whatever
// the server does when one of its timers fires (a slow frame, a stream's
// bookmark or timeout, a request's latency) would otherwise race with what
// other goroutines do at the same instant of virtual time (a write, a cut,
// a client leaving), and which goroutine the clock's tick runs first is
// the scheduler's choice. The clock moves on only once every goroutine of
// the bubble waits, so a nanosecond's sleep ends after all of them: the
// server always acts last.
func settle() { time.Sleep(time.Nanosecond) }

// closed reports whether c is closed, without waiting.
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// send writes one frame, applying the stream's fault. A killed stream sends
// nothing more: a restarted server's old connections are gone.
func (st *stream) send(ctx context.Context, f []byte) error {
	select {
	case <-st.killed:
		return errCut
	default:
	}
	if st.mode == SlowFrames {
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
		case <-st.killed:
		case <-t.C:
		}
		t.Stop()
		settle()
		switch { // the cut first, whichever select saw (see run)
		case closed(st.killed):
			return errCut
		case ctx.Err() != nil:
			return ctx.Err()
		}
	}
	if st.mode == Respell {
		f = respell(f, st.frames)
	}
	cut, inString := "", false
	if st.mode == CutFrames && isEvent(f) && (st.whole || st.req%2 == 0) {
		f, cut, inString = cutShort(f)
	}
	corrupted := ""
	if st.mode == CorruptFrames && isEvent(f) {
		f, corrupted = corrupt(f)
	}
	if _, err := st.pw.Write(f); err != nil {
		return err
	}
	st.s.mu.Lock()
	switch r := &st.s.requests[st.req]; {
	case corrupted != "" && r.Corrupted == "":
		r.Corrupted = corrupted
	case r.Cut != "":
		r.ReadAfterCut = true
	case cut != "":
		r.Cut, r.CutInString, r.CutLined = cut, inString, st.whole
	}
	st.s.mu.Unlock()
	st.whole = st.whole || cut == ""
	st.frames++
	switch {
	case st.mode == CutAfterFirstFrame:
		return errCut
	case st.mode == ErrorAfterFirstEvent:
		st.ended(false)
		if _, err := st.pw.Write(errorFrame(500, metav1.StatusReasonInternalError, "the server broke the watch (fault)")); err == nil && st.eventRV != 0 {
			st.s.mu.Lock()
			st.s.requests[st.req].ErrorAfter = strconv.FormatInt(st.eventRV, 10)
			st.s.mu.Unlock()
		}
		return errEnded
	}
	return nil
}

type wireEvent struct {
	Type   string `json:"type"`
	Object any    `json:"object"`
}

func frame(typ string, obj *v1alpha1.MyResource) []byte {
	raw, _ := json.Marshal(wireEvent{Type: typ, Object: obj})
	return append(raw, '\n')
}

// unknownFrame is an event of a type no client knows (yet).
var unknownFrame = []byte(`{"type":"FUTURE","object":{"kind":"Hint","apiVersion":"v1"}}` + "\n")

// isEvent: an ADDED, MODIFIED or DELETED frame (frame writes the type first).
func isEvent(f []byte) bool {
	for _, typ := range []string{"ADDED", "MODIFIED", "DELETED"} {
		if bytes.HasPrefix(f, []byte(`{"type":"`+typ+`"`)) {
			return true
		}
	}
	return false
}

// cutShort cuts event frame f short, and ends it with a newline: in half,
// inside a string or after a key's colon, by its object's resourceVersion
// (see CutFrames). It returns the frame, the resourceVersion, and whether
// the cut is inside a string.
func cutShort(f []byte) ([]byte, string, bool) {
	rv := objectRV(f)
	n, _ := strconv.Atoi(rv)
	at := len(f) / 2
	switch n % 3 {
	case 1: // inside a string: after a key's colon and the value's quote
		if i := bytes.Index(f[at:], []byte(`":"`)); i >= 0 {
			at += i + 3
		}
	case 2: // after a key's colon
		if i := bytes.Index(f[at:], []byte(`":`)); i >= 0 {
			at += i + 2
		}
	}
	return append(bytes.Clone(f[:at]), '\n'), rv, insideString(f[:at])
}

// insideString: JSON text b ends inside a string.
func insideString(b []byte) bool {
	in, esc := false, false
	for _, c := range b {
		switch {
		case esc:
			esc = false
		case in && c == '\\':
			esc = true
		case c == '"':
			in = !in
		}
	}
	return in
}

// objectRV is the resourceVersion of event frame f's object.
func objectRV(f []byte) string {
	var ev struct {
		Object struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		} `json:"object"`
	}
	json.Unmarshal(f, &ev)
	return ev.Object.Metadata.ResourceVersion
}

// corrupt flips a bit of event frame f: the T of its object's
// creationTimestamp (0x54) becomes a backslash (0x5c), an escape JSON does
// not have ("\0"). It returns the frame and the object's resourceVersion.
func corrupt(f []byte) ([]byte, string) {
	rv := objectRV(f)
	key := []byte(`"creationTimestamp":"`)
	i := bytes.Index(f, key)
	if i < 0 {
		return f, ""
	}
	i += len(key)
	j := bytes.IndexByte(f[i:min(i+20, len(f))], 'T')
	if j < 0 {
		return f, ""
	}
	f = bytes.Clone(f)
	f[i+j] ^= 0x08
	return f, rv
}

// garbled is an event whose object a client cannot decode, but can tell
// which object it is (garbledObject).
func garbled(typ string, obj *v1alpha1.MyResource) []byte {
	raw, _ := json.Marshal(wireEvent{Type: typ, Object: garbledObject(obj, int(obj.Generation))})
	return append(raw, '\n')
}

// garbledObject is obj with its name, namespace and UID intact and a field
// of another type: its spec (n even) or its resourceVersion, a number.
func garbledObject(obj *v1alpha1.MyResource, n int) map[string]any {
	raw, _ := json.Marshal(obj)
	var m map[string]any
	json.Unmarshal(raw, &m)
	if n%2 == 0 {
		m["spec"] = map[string]any{"message": 42}
	} else {
		rv, _ := strconv.ParseInt(obj.ResourceVersion, 10, 64)
		m["metadata"].(map[string]any)["resourceVersion"] = rv
	}
	return m
}

// respell writes frame f (one event and its newline, as frame writes it)
// in the n-th of Respell's spellings (they take turns): the same event to
// Kubernetes' decoding.
func respell(f []byte, n int) []byte {
	var ev struct {
		Type   string          `json:"type"`
		Object json.RawMessage `json:"object"`
	}
	if json.Unmarshal(f, &ev) != nil || ev.Object == nil {
		return f
	}
	obj := []byte(ev.Object)
	// A key in another case after the real one: a case-insensitive decoder
	// would take its value.
	obj = bytes.Replace(obj, []byte(`"resourceVersion":"`), []byte(`"ResourceVersion":"0","resourceVersion":"`), 1)
	if i := bytes.Index(obj, []byte(`"ResourceVersion":"0","resourceVersion":"`)); i >= 0 {
		// (before the real one, above; now after it too)
		j := i + len(`"ResourceVersion":"0","resourceVersion":"`)
		if k := bytes.IndexByte(obj[j:], '"'); k >= 0 {
			obj = slices.Concat(obj[:j+k+1], []byte(`,"ResourceVersion":"1"`), obj[j+k+1:])
		}
	}
	if ev.Type == "ERROR" {
		obj = bytes.Replace(obj, []byte(`"status":"Failure",`), nil, 1)
	}
	typ := strconv.Quote(ev.Type)
	var out []byte
	switch n % 5 {
	case 0:
		out = fmt.Appendf(nil, `{"type":%s,"object":%s}`, typ, EscapeLetters(obj))
	case 1:
		out = fmt.Appendf(nil, `{"Type":"DELETED","OBJECT":{},"type":%s,"object":%s,"Object":null,"TYPE":"BOOKMARK"}`, typ, obj)
	case 2:
		out = fmt.Appendf(nil, `{"type":"ERROR","object":%s,"type":%s,"object":null}`, obj, typ)
	case 3:
		out = fmt.Appendf(nil, " {\t\"object\" :\r %s , \"kind\" : \"WatchEvent\" ,\"type\"\t:\t%s } ", obj, typ) // (no newline inside: a frame is a line)
	case 4:
		out = fmt.Appendf(nil, `{"typ\u0065":%s,"\u006fbject":%s}`, EscapeLetters([]byte(typ)), obj)
	}
	return append(out, '\n')
}

// respellPage writes a LIST page (as listBody marshals it) as Respell does:
// its metadata's keys in another case after the real ones, a first "items"
// holding an object the server does not have, the real one after it, and
// (every other resourceVersion) every string escaped in part.
func respellPage(raw []byte, rv int64) []byte {
	raw = bytes.Replace(raw, []byte(`"metadata":{`), []byte(`"items":[{"apiVersion":"example.com/v1alpha1","kind":"MyResource",`+
		`"metadata":{"name":"phantom","namespace":"ns","uid":"phantom","resourceVersion":"1"}}],"metadata":{"ResourceVersion":"0",`), 1)
	// The list's metadata ends before its (last) items: a key in another
	// case after the real ones there.
	if i := bytes.LastIndex(raw, []byte(`},"items":[`)); i >= 0 {
		raw = slices.Concat(raw[:i], []byte(`,"Continue":"not-a-token","ResourceVersion":"1"`), raw[i:])
	}
	if rv%2 == 0 {
		raw = EscapeLetters(raw)
	}
	return raw
}

// EscapeLetters writes every "a" and "e" inside the JSON strings of b
// (keys and values) as a \u escape: the same JSON to a decoder.
func EscapeLetters(b []byte) []byte {
	out := make([]byte, 0, len(b)+len(b)/4)
	in, esc := false, false
	for _, c := range b {
		switch {
		case !in:
			in = c == '"'
		case esc:
			esc = false
		case c == '\\':
			esc = true
		case c == '"':
			in = false
		case c == 'a' || c == 'e':
			out = fmt.Appendf(out, `\u%04x`, c)
			continue
		}
		out = append(out, c)
	}
	return out
}

// garbleItem: GarbleItem, with the server's lock (from a stream's goroutine).
func (s *Server) garbleItem(obj *v1alpha1.MyResource) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.GarbleItem != nil && s.GarbleItem(obj)
}

func bookmark(rv int64, initialEventsEnd bool) []byte {
	obj := &v1alpha1.MyResource{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "MyResource"}}
	obj.ResourceVersion = strconv.FormatInt(rv, 10)
	if initialEventsEnd {
		obj.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	}
	return frame("BOOKMARK", obj)
}

func errorFrame(code int32, reason metav1.StatusReason, message string) []byte {
	raw, _ := json.Marshal(wireEvent{Type: "ERROR", Object: &metav1.Status{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status:   metav1.StatusFailure, Code: code, Reason: reason, Message: message}})
	return append(raw, '\n')
}
