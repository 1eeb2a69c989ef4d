// Package authz guards the controller's own HTTP endpoints (/metrics and the
// live page) the way kube-apiserver guards its non-resource URLs, so that in
// a cluster they are not open to every pod.
//
// Each request must carry a bearer token. The token is authenticated by the
// API server (a TokenReview: who is this?), and the user it names is
// authorized for the request's path (a SubjectAccessReview: may they "get"
// "/metrics"?), so that plain RBAC decides who reads what:
//
//	kind: ClusterRole
//	rules:
//	- nonResourceURLs: ["/metrics"] # rawwatch-metrics-reader; ["/ui", "/ui/*"]: rawwatch-page-reader
//	  verbs: ["get"]
//
// This is what controller-runtime's filters.WithAuthenticationAndAuthorization
// (scaffolded by kubebuilder) and kube-rbac-proxy do, written with client-go's
// typed clients only. By default a token is taken when the API server takes
// it (its own audience): the controller could replay a caller's token
// there. Options.Audiences names audiences of the controller's own, as
// kube-rbac-proxy's --auth-token-audiences does: callers then send tokens
// made for those, which the API server itself refuses.
//
// Answers: 401 without a token or with one the server does not know (always
// the same body: the caller is told nothing of why), 413 for a request with
// a body and 431 for one heavier than MaxHeaderWeight (both unreviewed),
// 404 for a path the server does not route and 405 for a method other than
// GET and HEAD (both to authenticated callers only, and never reviewed),
// 403 when RBAC says no, 503 when the server could not be asked (never
// "allow"), 429 when no review could start within MaxWait.
//
// The guard must not become a way to hurt the controller or the API server.
// What an unauthenticated caller chooses (the token, the path) is never
// kept:
//   - Authentication is cached apart from authorization, keyed by an HMAC of
//     the token (32 bytes, a key of the guard's own). An authenticated token
//     is kept with the user the server named for TokenTTL; a refused one
//     with nothing for RefusedTTL. Each of the two caches holds at most
//     MaxEntries, the first also at most MaxUserBytes of user names and
//     groups. A flood of made-up tokens fills only the cache of refusals.
//   - Authorization is asked only for an authenticated user and a routed
//     path, and cached by a hash of the user, verb and path: AllowTTL when
//     allowed, DenyTTL when not, at most MaxEntries.
//   - A cached answer that said yes, in the second half of its life, is
//     served and refreshed ahead, in the background, so that a caller that
//     comes back more often than every TTL (a scrape) never waits for a
//     review. A refresh whose TokenReview says "not authenticated" with
//     status.error set keeps the old answer until it expires.
//   - Concurrent requests for one key (a token; a user, verb and path) wait
//     on one review in flight; each counts as waiting in the review's lane.
//   - Reviews go through two lanes, each with a client of its own limited to
//     DefaultQPS requests a second (burst 1) and at most MaxInFlight reviews
//     at once. Tokens not seen authenticated take the first lane. The
//     SubjectAccessReviews of authenticated users take the second, which a
//     made-up token cannot enter. Refreshes ahead take the second lane's
//     client but MaxInFlight slots of their own, which first reviews and
//     refusals never take. A request waits at most MaxWait for a slot, and
//     at most MaxWaiting requests wait per lane, for a slot or on another's
//     review: the rest get 429 at once. A refresh ahead that finds no free
//     slot is tried again at the next request. The API server sees at most
//     2×DefaultQPS reviews a second.
//   - So at most 2×(MaxInFlight+MaxWaiting) requests are held for reviews
//     (136 by default), whatever arrives, each for at most MaxWait plus
//     ReviewTimeout. What each holds is its header, of bounded weight (no
//     body, no trailers): at most 128 KiB of heap and three goroutines (the
//     handler's and its connection's two, over HTTP/2 on a connection of
//     its own; two over HTTP/1.1), held by app's
//     TestAJoinerFloodHoldsALanesWorth and held_test.go.
//   - A new token cannot be told from a made-up one before it is reviewed:
//     while a flood holds the first lane it gets 429, never 401.
//   - A failed review is not cached; an Authorization header longer than
//     MaxTokenBytes is refused unread.
package authz

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// Defaults of Options.
const (
	// A scrape every minute (Prometheus's default) is served from the cache
	// for ever: each answer is refreshed ahead after half its TTL.
	DefaultTokenTTL   = 2 * time.Minute
	DefaultRefusedTTL = 30 * time.Second
	DefaultAllowTTL   = 2 * time.Minute
	DefaultDenyTTL    = 30 * time.Second
	// Per lane.
	DefaultMaxInFlight = 4
	DefaultMaxWaiting  = 64
	DefaultMaxWait     = 2 * time.Second
	// Per cache.
	DefaultMaxEntries   = 4096
	DefaultMaxUserBytes = 4 << 20
	// Service account tokens are about 1 KiB; OIDC ones a few.
	DefaultMaxTokenBytes = 16 << 10
	// What a request's target and header fields may weigh beyond its
	// token (see Options.MaxHeaderWeight).
	DefaultHeaderWeightBeyondToken = 8 << 10
	// Each lane's client: at most this many requests a second.
	DefaultQPS   = 5
	DefaultBurst = 1
	// How long one review may take.
	DefaultReviewTimeout = 10 * time.Second
)

// Options tune a Guard; zero values take the defaults above.
type Options struct {
	TokenTTL, RefusedTTL, AllowTTL, DenyTTL time.Duration
	MaxInFlight, MaxWaiting                 int
	MaxWait                                 time.Duration
	MaxEntries, MaxUserBytes                int
	MaxTokenBytes                           int
	// MaxHeaderWeight bounds what a request may weigh to be reviewed: its
	// target and header fields, each field counted as its name, its value
	// and 32 bytes, as HTTP/2 counts them (RFC 9113, 6.5.2), since many
	// small fields cost more parsed than on the wire. Default:
	// MaxTokenBytes + DefaultHeaderWeightBeyondToken.
	MaxHeaderWeight int
	ReviewTimeout   time.Duration
	// Audiences, when set, are the audiences a token must have been made
	// for (kube-rbac-proxy's --auth-token-audiences): each TokenReview asks
	// the API server to check them, and a token it finds for none of them
	// (one for the API server itself, as every pod's own) is refused. A
	// caller then sends a token the API server does not take, so the
	// controller cannot replay it there. Unset: the API server's own
	// audience, and any token it takes is taken.
	Audiences []string
}

// Guard authenticates and authorizes HTTP requests against the API server.
type Guard struct {
	opts     Options
	now      func() time.Time // tests move it
	newToken lane             // reviews of tokens not seen authenticated
	known    lane             // reviews for authenticated users
	refresh  lane             // refreshes ahead of answers that said yes: known's client, slots of its own
	bg       sync.WaitGroup   // refreshes ahead running
	macKey   []byte

	mu         sync.Mutex
	users      *cache[*authnv1.UserInfo] // authenticated tokens
	refused    *cache[struct{}]          // tokens the server does not know
	grants     *cache[bool]              // user, verb and path: allowed?
	lastFailed time.Time                 // last failed review logged
	flights    map[key]*flight           // reviews in flight, by cache key
}

// A flight is one review in flight; requests for the same key wait on it.
type flight struct {
	done   chan struct{}
	status int // http.StatusOK once the review was made, else 429 or 503
}

// New returns a Guard whose reviews go through two clients of their own
// made from cfg, each limited to DefaultQPS requests a second.
func New(cfg *rest.Config, opts Options) (*Guard, error) {
	client := func() (kubernetes.Interface, error) {
		cfg := rest.CopyConfig(cfg)
		cfg.QPS, cfg.Burst = DefaultQPS, DefaultBurst
		cfg.RateLimiter = nil
		return kubernetes.NewForConfig(cfg)
	}
	newToken, err := client()
	if err != nil {
		return nil, fmt.Errorf("authz: %w", err)
	}
	known, err := client()
	if err != nil {
		return nil, fmt.Errorf("authz: %w", err)
	}
	return newGuard(newToken, known, opts), nil
}

// NewForClient returns a Guard that makes every review through kube.
func NewForClient(kube kubernetes.Interface, opts Options) *Guard {
	return newGuard(kube, kube, opts)
}

func newGuard(newToken, known kubernetes.Interface, opts Options) *Guard {
	// A zero or negative field takes its default.
	opts.TokenTTL = cmp.Or(max(opts.TokenTTL, 0), DefaultTokenTTL)
	opts.RefusedTTL = cmp.Or(max(opts.RefusedTTL, 0), DefaultRefusedTTL)
	opts.AllowTTL = cmp.Or(max(opts.AllowTTL, 0), DefaultAllowTTL)
	opts.DenyTTL = cmp.Or(max(opts.DenyTTL, 0), DefaultDenyTTL)
	opts.MaxWait = cmp.Or(max(opts.MaxWait, 0), DefaultMaxWait)
	opts.ReviewTimeout = cmp.Or(max(opts.ReviewTimeout, 0), DefaultReviewTimeout)
	opts.MaxInFlight = cmp.Or(max(opts.MaxInFlight, 0), DefaultMaxInFlight)
	opts.MaxWaiting = cmp.Or(max(opts.MaxWaiting, 0), DefaultMaxWaiting)
	opts.MaxEntries = cmp.Or(max(opts.MaxEntries, 0), DefaultMaxEntries)
	opts.MaxUserBytes = cmp.Or(max(opts.MaxUserBytes, 0), DefaultMaxUserBytes)
	opts.MaxTokenBytes = cmp.Or(max(opts.MaxTokenBytes, 0), DefaultMaxTokenBytes)
	opts.MaxHeaderWeight = cmp.Or(max(opts.MaxHeaderWeight, 0), opts.MaxTokenBytes+DefaultHeaderWeightBeyondToken)
	macKey := make([]byte, 32)
	_, _ = rand.Read(macKey) // never fails (crypto/rand)
	return &Guard{opts: opts, now: time.Now, macKey: macKey,
		newToken: newLane(newToken, opts), known: newLane(known, opts), refresh: newLane(known, opts),
		flights: map[key]*flight{},
		users:   newCache[*authnv1.UserInfo](opts.MaxEntries, opts.MaxUserBytes),
		refused: newCache[struct{}](opts.MaxEntries, 0),
		grants:  newCache[bool](opts.MaxEntries, 0)}
}

type userKey struct{}

// User is the name of the user a request let through by the guard was
// authenticated as ("" for a request that did not pass a guard).
func User(ctx context.Context) string {
	s, _ := ctx.Value(userKey{}).(string)
	return s
}

// Wrap returns next behind the guard. paths are the paths next serves:
// only these are authorized; any other gets 404 once the caller is
// authenticated.
func (g *Guard) Wrap(next http.Handler, paths ...string) http.Handler {
	routed := map[string]bool{}
	for _, p := range paths {
		routed[p] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, user := g.check(r, routed)
		switch status {
		case http.StatusOK:
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, user.Username)))
			return
		case http.StatusUnauthorized:
			w.Header().Set("WWW-Authenticate", `Bearer realm="rawwatch"`)
			http.Error(w, "Unauthorized", status)
		case http.StatusForbidden:
			http.Error(w, fmt.Sprintf("Forbidden: user %q may not get %s", user.Username, r.URL.Path), status)
		case http.StatusMethodNotAllowed:
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "Method not allowed", status)
		case http.StatusNotFound:
			http.NotFound(w, r)
		case http.StatusRequestEntityTooLarge:
			http.Error(w, "Request entity too large: these endpoints take no request body", status)
		case http.StatusRequestHeaderFieldsTooLarge:
			http.Error(w, fmt.Sprintf("Request header fields too large: at most %d bytes, each field counted as its name, its value and 32 bytes", g.opts.MaxHeaderWeight), status)
		case http.StatusTooManyRequests:
			w.Header().Set("Retry-After", "1")
			http.Error(w, "Too many requests: reviews of other requests are in flight", status)
		default:
			w.Header().Set("Retry-After", "1")
			http.Error(w, "Service unavailable: could not ask the API server who may read this; try again later", status)
		}
	})
}

// check decides one request: http.StatusOK to let it through, else the
// status to answer; user is who the token names, once it is known.
func (g *Guard) check(r *http.Request, routed map[string]bool) (status int, user *authnv1.UserInfo) {
	h := r.Header.Get("Authorization")
	if len(h) > g.opts.MaxTokenBytes {
		return http.StatusUnauthorized, nil
	}
	scheme, token, ok := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return http.StatusUnauthorized, nil
	}
	// A request may wait for a review: it must hold little meanwhile. A
	// server request has no body exactly when its length is known to be 0
	// (HTTP/2: it ended with its header; its Body is never http.NoBody).
	// Trailers count as a body: declared ones are kept in r.Trailer, and
	// over HTTP/2 they may follow a header that said Content-Length 0.
	if r.ContentLength != 0 || r.Trailer != nil {
		return http.StatusRequestEntityTooLarge, nil
	}
	if weight(r) > g.opts.MaxHeaderWeight {
		return http.StatusRequestHeaderFieldsTooLarge, nil
	}
	// One deadline for both reviews (a new token on a path not yet granted
	// takes two in turn): the request is held at most MaxWait+ReviewTimeout.
	ctx, cancel := context.WithTimeout(r.Context(), g.opts.MaxWait+g.opts.ReviewTimeout)
	defer cancel()
	user, status = g.authenticate(ctx, token)
	if status != http.StatusOK {
		return status, nil
	}
	if !routed[r.URL.Path] {
		return http.StatusNotFound, user
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return http.StatusMethodNotAllowed, user
	}
	return g.authorize(ctx, user, r.URL.Path), user
}

// weight is what r's request line and header fields weigh (Options.MaxHeaderWeight).
func weight(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Host)
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 32
		}
	}
	return n
}

// authenticate answers who token is: from the cache, or the first lane.
func (g *Guard) authenticate(ctx context.Context, token string) (*authnv1.UserInfo, int) {
	k := g.tokenKey(token)
	now := g.now()
	g.mu.Lock()
	u, found, refresh := g.users.get(k, now)
	_, refused, _ := g.refused.get(k, now)
	g.mu.Unlock()
	switch {
	case found:
		if refresh {
			g.ahead(func() { g.users.unmark(k) }, func(ctx context.Context) error {
				return g.reviewToken(ctx, g.known.kube, k, token, true)
			})
		}
		return u, http.StatusOK
	case refused:
		return nil, http.StatusUnauthorized
	}
	if status := g.once(ctx, k, &g.newToken, func(ctx context.Context) error {
		return g.reviewToken(ctx, g.newToken.kube, k, token, false)
	}); status != http.StatusOK {
		return nil, status
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if u, found, _ := g.users.get(k, g.now()); found {
		return u, http.StatusOK
	}
	return nil, http.StatusUnauthorized
}

// reviewToken asks the server who token is and caches the answer. On a
// refresh (the token was authenticated) a refusal that carries
// status.error is taken for a failure of the server's authenticator, not a
// verdict: the old answer is kept until it expires, TokenTTL after the
// server last said yes.
func (g *Guard) reviewToken(ctx context.Context, kube kubernetes.Interface, k key, token string, refresh bool) error {
	tr, err := kube.AuthenticationV1().TokenReviews().Create(ctx,
		&authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token, Audiences: g.opts.Audiences}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("TokenReview: %w", err)
	}
	if refresh && !tr.Status.Authenticated && tr.Status.Error != "" {
		return fmt.Errorf("TokenReview of a token authenticated before: %s", tr.Status.Error)
	}
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	// An empty status.audiences means the API server's own audience (and an
	// authenticator that ignored the ones asked for): not one of ours.
	if !tr.Status.Authenticated || len(g.opts.Audiences) > 0 && !slices.ContainsFunc(tr.Status.Audiences, func(a string) bool {
		return slices.Contains(g.opts.Audiences, a)
	}) {
		g.users.remove(k)
		g.refused.put(k, struct{}{}, 0, now, g.opts.RefusedTTL, false)
		return nil
	}
	u := tr.Status.User
	g.refused.remove(k)
	g.users.put(k, &u, userBytes(&u), now, g.opts.TokenTTL, true)
	return nil
}

// authorize answers whether user may get path: from the cache, or the
// second lane.
func (g *Guard) authorize(ctx context.Context, user *authnv1.UserInfo, path string) int {
	k := grantKey(user, "get", path)
	now := g.now()
	g.mu.Lock()
	allowed, found, refresh := g.grants.get(k, now)
	g.mu.Unlock()
	if found {
		if refresh {
			g.ahead(func() { g.grants.unmark(k) }, func(ctx context.Context) error {
				return g.reviewAccess(ctx, k, user, path)
			})
		}
		return statusOf(allowed)
	}
	if status := g.once(ctx, k, &g.known, func(ctx context.Context) error {
		return g.reviewAccess(ctx, k, user, path)
	}); status != http.StatusOK {
		return status
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	allowed, _, _ = g.grants.get(k, g.now())
	return statusOf(allowed)
}

func statusOf(allowed bool) int {
	if allowed {
		return http.StatusOK
	}
	return http.StatusForbidden
}

// reviewAccess asks the server whether user may get path and caches the
// answer.
func (g *Guard) reviewAccess(ctx context.Context, k key, u *authnv1.UserInfo, path string) error {
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar, err := g.known.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{
		Spec: authzv1.SubjectAccessReviewSpec{
			User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
			NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: "get"},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("SubjectAccessReview: %w", err)
	}
	allowed := sar.Status.Allowed && !sar.Status.Denied
	ttl := g.opts.DenyTTL
	if allowed {
		ttl = g.opts.AllowTTL
	}
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.grants.put(k, allowed, 0, now, ttl, allowed)
	return nil
}

// once makes review through l unless a review of the same key is in flight
// already, in which case it waits for that one's outcome: concurrent
// requests for one key cost one review. It answers http.StatusOK once the
// review was made (its answer is in the cache), 429 when no slot came
// within MaxWait, 503 when the review failed. The review does not end with
// the caller that started it (the others wait on it); it is bounded by
// MaxWait and ReviewTimeout, and by ctx's deadline.
func (g *Guard) once(ctx context.Context, k key, l *lane, review func(context.Context) error) int {
	g.mu.Lock()
	if f, ok := g.flights[k]; ok {
		g.mu.Unlock()
		// It waits in the lane as much as one waiting for a slot does.
		if !l.enter() {
			return http.StatusTooManyRequests
		}
		defer l.leave()
		select {
		case <-f.done:
			return f.status
		case <-ctx.Done():
			return http.StatusServiceUnavailable
		}
	}
	f := &flight{done: make(chan struct{}), status: http.StatusServiceUnavailable}
	g.flights[k] = f
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		delete(g.flights, k)
		g.mu.Unlock()
		close(f.done)
	}()
	// The review outlives a caller that hangs up (others may wait on it),
	// not the caller's deadline: a slot within MaxWait, the review within
	// ReviewTimeout, both within what the request has left.
	end, bounded := ctx.Deadline()
	left := func(d time.Duration) time.Duration {
		if bounded {
			return min(d, time.Until(end))
		}
		return d
	}
	ctx = context.WithoutCancel(ctx)
	if !l.acquire(ctx, left(g.opts.MaxWait)) {
		f.status = http.StatusTooManyRequests
		return f.status
	}
	defer l.release()
	ctx, cancel := context.WithTimeout(ctx, left(g.opts.ReviewTimeout))
	defer cancel()
	if err := review(ctx); err != nil {
		g.failed(ctx, err)
		return f.status
	}
	f.status = http.StatusOK
	return f.status
}

// ahead refreshes a cached answer that said yes in the background, through
// the second lane's client but slots of its own (which first reviews and
// refusals never take), if one is free; unmark (called under g.mu) lets
// the next request try again when none is, or when the review fails.
func (g *Guard) ahead(unmark func(), review func(context.Context) error) {
	if !g.refresh.try() {
		g.mu.Lock()
		unmark()
		g.mu.Unlock()
		return
	}
	g.bg.Go(func() {
		defer g.refresh.release()
		ctx, cancel := context.WithTimeout(context.Background(), g.opts.ReviewTimeout)
		defer cancel()
		if err := review(ctx); err != nil {
			g.mu.Lock()
			unmark()
			g.mu.Unlock()
			g.failed(ctx, err)
		}
	})
}

// failed logs a failed review: the first in a minute as an error (a
// missing permission of the controller's, say), the rest at V(2). The
// caller is not told why.
func (g *Guard) failed(ctx context.Context, err error) {
	log := klog.FromContext(ctx)
	g.mu.Lock()
	now := g.now()
	first := now.Sub(g.lastFailed) >= time.Minute
	if first {
		g.lastFailed = now
	}
	g.mu.Unlock()
	if first {
		log.Error(err, "Could not ask the API server who may read an endpoint; answering 503")
	} else {
		log.V(2).Info("Could not review a request", "err", err)
	}
}

// tokenKey is the HMAC of token under the guard's own key: a token is
// never kept, and a caller cannot aim at the map's buckets.
func (g *Guard) tokenKey(token string) key {
	m := hmac.New(sha256.New, g.macKey)
	m.Write([]byte(token))
	return key(m.Sum(nil))
}

// grantKey hashes what a SubjectAccessReview asks, each field length-prefixed.
func grantKey(u *authnv1.UserInfo, verb, path string) key {
	h := sha256.New()
	put := func(s string) {
		h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(s))))
		h.Write([]byte(s))
	}
	put(u.Username)
	put(u.UID)
	putAll := func(ss []string) {
		put(fmt.Sprint(len(ss)))
		for _, s := range ss {
			put(s)
		}
	}
	putAll(u.Groups)
	names := make([]string, 0, len(u.Extra))
	for n := range u.Extra {
		names = append(names, n)
	}
	slices.Sort(names)
	putAll(names)
	for _, n := range names {
		putAll(u.Extra[n])
	}
	put(verb)
	put(path)
	return key(h.Sum(nil))
}

// userBytes is about what u costs in the cache.
func userBytes(u *authnv1.UserInfo) int {
	n := 256 + len(u.Username) + len(u.UID)
	for _, g := range u.Groups {
		n += 16 + len(g)
	}
	for k, vs := range u.Extra {
		n += 64 + len(k)
		for _, v := range vs {
			n += 16 + len(v)
		}
	}
	return n
}

// Len is how many answers are cached: tokens authenticated, tokens refused,
// and grants.
func (g *Guard) Len() (users, refused, grants int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.users.m), len(g.refused.m), len(g.grants.m)
}

// A lane is a client and the reviews running through it.
type lane struct {
	kube       kubernetes.Interface
	slots      chan struct{}
	waiting    atomic.Int32
	maxWaiting int32
}

func newLane(kube kubernetes.Interface, opts Options) lane {
	return lane{kube: kube, slots: make(chan struct{}, opts.MaxInFlight), maxWaiting: int32(opts.MaxWaiting)}
}

// acquire takes a slot, waiting at most wait; false when none came or too
// many requests wait already.
func (l *lane) acquire(ctx context.Context, wait time.Duration) bool {
	if l.try() {
		return true
	}
	if !l.enter() {
		return false
	}
	defer l.leave()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case l.slots <- struct{}{}:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// enter counts a request in as waiting in the lane (for a slot, or for
// another's review), unless MaxWaiting wait already.
func (l *lane) enter() bool {
	if l.waiting.Add(1) > l.maxWaiting {
		l.waiting.Add(-1)
		return false
	}
	return true
}

func (l *lane) leave() { l.waiting.Add(-1) }

func (l *lane) try() bool {
	select {
	case l.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

func (l *lane) release() { <-l.slots }
