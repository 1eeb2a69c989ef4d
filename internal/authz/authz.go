// Package authz guards the controller's own HTTP endpoints (/metrics and the
// live page) the way kube-apiserver guards its non-resource URLs, so that in
// a cluster they are not open to every pod.
//
// Each request must carry a bearer token. The token is authenticated by the
// API server (a TokenReview: who is this?), and the user it names is
// authorized for the request's verb and path (a SubjectAccessReview: may
// they "get" "/metrics"?), so that plain RBAC decides who reads what:
//
//	kind: ClusterRole
//	rules:
//	- nonResourceURLs: ["/metrics"] # rawwatch-metrics-reader; ["/ui", "/ui/*"]: rawwatch-page-reader
//	  verbs: ["get"]
//
// This is what controller-runtime's filters.WithAuthenticationAndAuthorization
// (scaffolded by kubebuilder) and kube-rbac-proxy do, written with client-go's
// typed clients only.
//
// Answers: 401 without a token or with one the server does not know, 403
// when RBAC says no, 503 when the server could not be asked (never "allow"),
// 429 when too many reviews are already in flight. The guard must not become
// a way to hurt the controller or the API server:
//   - decisions are cached by the token's SHA-256 (never the token itself),
//     verb and path: allowed for AllowTTL, refused for DenyTTL; a failed
//     review is not cached;
//   - at most MaxInFlight reviews run at once, the rest get 429 at once;
//   - reviews go through a client of their own, limited to a few requests a
//     second, so that a flood of made-up tokens cannot eat the controller's
//     own client-side rate limit; the API server sees at most that;
//   - an Authorization header longer than MaxTokenBytes is refused unread;
//   - the cache holds at most MaxEntries decisions.
package authz

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"sync"
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
	DefaultAllowTTL    = 10 * time.Second
	DefaultDenyTTL     = 5 * time.Second
	DefaultMaxInFlight = 4
	DefaultMaxEntries  = 4096
	// Service account tokens are about 1 KiB; OIDC ones a few.
	DefaultMaxTokenBytes = 16 << 10
	// The reviews' own client: at most this many requests a second.
	DefaultQPS   = 5
	DefaultBurst = 10
	// How long one request may wait for its reviews.
	DefaultReviewTimeout = 10 * time.Second
)

// Options tune a Guard; zero values take the defaults above.
type Options struct {
	AllowTTL, DenyTTL time.Duration
	MaxInFlight       int
	MaxEntries        int
	MaxTokenBytes     int
	ReviewTimeout     time.Duration
}

// Guard authenticates and authorizes HTTP requests against the API server.
type Guard struct {
	kube kubernetes.Interface
	opts Options
	now  func() time.Time // tests move it
	sem  chan struct{}    // reviews in flight

	mu         sync.Mutex
	cache      map[cacheKey]decision
	lastFailed time.Time // last failed review logged
}

// logFailure tells whether a failed review is the first in a minute.
func (g *Guard) logFailure() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	if now.Sub(g.lastFailed) < time.Minute {
		return false
	}
	g.lastFailed = now
	return true
}

type cacheKey struct {
	token      [sha256.Size]byte
	verb, path string
}

type decision struct {
	status  int    // http.StatusOK, StatusUnauthorized or StatusForbidden
	message string // why, for a refusal
	expires time.Time
}

// New returns a Guard whose reviews go through a client of their own made
// from cfg, limited to DefaultQPS requests a second.
func New(cfg *rest.Config, opts Options) (*Guard, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = DefaultQPS, DefaultBurst
	cfg.RateLimiter = nil
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("authz: %w", err)
	}
	return NewForClient(kube, opts), nil
}

// NewForClient returns a Guard that reviews through kube.
func NewForClient(kube kubernetes.Interface, opts Options) *Guard {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defInt := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&opts.AllowTTL, DefaultAllowTTL)
	def(&opts.DenyTTL, DefaultDenyTTL)
	def(&opts.ReviewTimeout, DefaultReviewTimeout)
	defInt(&opts.MaxInFlight, DefaultMaxInFlight)
	defInt(&opts.MaxEntries, DefaultMaxEntries)
	defInt(&opts.MaxTokenBytes, DefaultMaxTokenBytes)
	return &Guard{kube: kube, opts: opts, now: time.Now,
		sem: make(chan struct{}, opts.MaxInFlight), cache: map[cacheKey]decision{}}
}

// Wrap returns next behind the guard.
func (g *Guard) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, msg := g.Check(r)
		if status == http.StatusOK {
			next.ServeHTTP(w, r)
			return
		}
		switch status {
		case http.StatusUnauthorized:
			w.Header().Set("WWW-Authenticate", `Bearer realm="rawwatch"`)
		case http.StatusTooManyRequests, http.StatusServiceUnavailable:
			w.Header().Set("Retry-After", "1")
		}
		http.Error(w, msg, status)
	})
}

// Check decides one request: http.StatusOK to let it through, else the
// status to answer and why.
func (g *Guard) Check(r *http.Request) (status int, message string) {
	h := r.Header.Get("Authorization")
	if len(h) > g.opts.MaxTokenBytes {
		return http.StatusUnauthorized, "Unauthorized: the Authorization header is too long"
	}
	scheme, token, ok := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return http.StatusUnauthorized, "Unauthorized: send a bearer token (Authorization: Bearer <token>) of a user allowed to get " + r.URL.Path
	}
	key := cacheKey{token: sha256.Sum256([]byte(token)), verb: verbOf(r.Method), path: r.URL.Path}
	if d, ok := g.cached(key); ok {
		return d.status, d.message
	}
	select {
	case g.sem <- struct{}{}:
		defer func() { <-g.sem }()
	default:
		return http.StatusTooManyRequests, "Too many requests: reviews of other tokens are in flight"
	}
	ctx, cancel := context.WithTimeout(r.Context(), g.opts.ReviewTimeout)
	defer cancel()
	d, err := g.review(ctx, token, key.verb, key.path)
	if err != nil {
		// The caller is not told why (it may not even be authenticated);
		// the log is, once a minute at most (a missing permission of the
		// controller's, say), the rest at V(2).
		log := klog.FromContext(r.Context())
		if g.logFailure() {
			log.Error(err, "Could not ask the API server who may read an endpoint; answering 503", "path", key.path)
		} else {
			log.V(2).Info("Could not review a request", "path", key.path, "err", err)
		}
		return http.StatusServiceUnavailable, "Service unavailable: could not ask the API server who may read this; try again later"
	}
	ttl := g.opts.DenyTTL
	if d.status == http.StatusOK {
		ttl = g.opts.AllowTTL
	}
	d.expires = g.now().Add(ttl)
	g.store(key, d)
	return d.status, d.message
}

func (g *Guard) review(ctx context.Context, token, verb, path string) (decision, error) {
	tr, err := g.kube.AuthenticationV1().TokenReviews().Create(ctx,
		&authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return decision{}, fmt.Errorf("TokenReview: %w", err)
	}
	if !tr.Status.Authenticated {
		msg := "Unauthorized: the API server does not know this token"
		if tr.Status.Error != "" {
			msg += " (" + tr.Status.Error + ")"
		}
		return decision{status: http.StatusUnauthorized, message: msg}, nil
	}
	u := tr.Status.User
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar, err := g.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{
		Spec: authzv1.SubjectAccessReviewSpec{
			User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
			NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: verb},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return decision{}, fmt.Errorf("SubjectAccessReview: %w", err)
	}
	if !sar.Status.Allowed || sar.Status.Denied {
		msg := fmt.Sprintf("Forbidden: user %q may not %s %s", u.Username, verb, path)
		if sar.Status.Reason != "" {
			msg += " (" + sar.Status.Reason + ")"
		}
		return decision{status: http.StatusForbidden, message: msg}, nil
	}
	return decision{status: http.StatusOK}, nil
}

func (g *Guard) cached(k cacheKey) (decision, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	d, ok := g.cache[k]
	if !ok {
		return decision{}, false
	}
	if !g.now().Before(d.expires) {
		delete(g.cache, k)
		return decision{}, false
	}
	return d, true
}

func (g *Guard) store(k cacheKey, d decision) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.cache) >= g.opts.MaxEntries {
		now := g.now()
		for k, d := range g.cache {
			if !now.Before(d.expires) {
				delete(g.cache, k)
			}
		}
		// Still full of live decisions (a flood of tokens): forget some.
		// Forgetting only costs a review later; it never lets anything in.
		for k := range g.cache {
			if len(g.cache) < g.opts.MaxEntries {
				break
			}
			delete(g.cache, k)
		}
	}
	g.cache[k] = d
}

// Len is how many decisions are cached.
func (g *Guard) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.cache)
}

// verbOf maps an HTTP method to the verb RBAC checks for a non-resource URL:
// the method in lower case, as kube-apiserver does.
func verbOf(method string) string {
	if method == http.MethodHead {
		return "get" // what GET would show, without the body
	}
	return strings.ToLower(method)
}
