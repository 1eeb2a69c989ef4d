package ring

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"rawwatch/internal/testkit"
	"rawwatch/shard"
)

// Members on the real API server, their rounds driven by the test on one
// virtual clock: the server stores the Leases, orders the writes and the
// reads and moves the resourceVersions; the members' clocks, pauses and
// failures are the test's.

// server is the local control plane and a namespace of the test's own.
type server struct {
	t     *testing.T
	cfg   *rest.Config
	ns    string
	admin kubernetes.Interface
	ctx   context.Context

	mu  sync.Mutex // a member leaving reads the clock on a goroutine of its own
	now time.Time  // the members' clock
}

// clock reads the members' clock; set moves it.
func (s *server) clock() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

func (s *server) set(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = t
}

func onServer(t *testing.T) *server {
	cp, ns, _ := testkit.Parallel(t)
	return &server{t: t, cfg: cp.Config(), ns: ns, admin: kubernetes.NewForConfigOrDie(cp.Config()), now: epoch,
		ctx: klog.NewContext(context.Background(), klog.Background())}
}

// cut, while set, answers every request of a client made by member with a
// 500 (no Retry-After: client-go does not retry it).
type cut struct{ atomic.Bool }

type cutting struct {
	cut  *cut
	next http.RoundTripper
}

func (c cutting) RoundTrip(r *http.Request) (*http.Response, error) {
	if !c.cut.Load() {
		return c.next.RoundTrip(r)
	}
	body := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"cut off","code":500}`
	return &http.Response{StatusCode: http.StatusInternalServerError, Status: "500 Internal Server Error",
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)), Request: r}, nil
}

// member joins ring "r" as id with the handoff on (nothing ever busy, no
// sweeps unless with says so), on the server's clock; cut off while the
// returned switch is set.
func (s *server) member(id string, lease, renew time.Duration, with ...func(*Config)) (*Member, *cut) {
	s.t.Helper()
	c := &cut{}
	cfg := rest.CopyConfig(s.cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return cutting{c, rt} })
	client, err := NewClient(cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	rc := Config{Client: client, Namespace: s.ns, Ring: "r", Identity: id,
		LeaseDuration: lease, RenewPeriod: renew, Now: s.clock,
		OnClaims: func(Claims) {}, Busy: func() (_, _ shard.SlotSet) { return }}
	for _, w := range with {
		w(&rc)
	}
	m, err := New(rc)
	if err != nil {
		s.t.Fatal(err)
	}
	return m, c
}

// joined is members of ids (the clocked tests' lease and renew period),
// playing until they have joined and divided the slots.
func (s *server) joined(ids ...string) (*play, []*Member) {
	s.t.Helper()
	var ms []*Member
	for _, id := range ids {
		m, _ := s.member(id, lease, renew)
		ms = append(ms, m)
	}
	p := s.play(ms...)
	p.run(12*time.Second, strings.Join(ids, ", ")+" join")
	return p, ms
}

// edit writes the Lease name as by hand: read, changed by f, updated.
func (s *server) edit(name string, f func(*coordinationv1.Lease)) {
	s.t.Helper()
	if err := s.tryEdit(name, f); err != nil {
		s.t.Fatal(err)
	}
}

// tryEdit is edit, saying why it could not.
func (s *server) tryEdit(name string, f func(*coordinationv1.Lease)) error {
	leases := s.admin.CoordinationV1().Leases(s.ns)
	l, err := leases.Get(s.ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	f(l)
	_, err = leases.Update(s.ctx, l, metav1.UpdateOptions{})
	return err
}

// play runs the members' rounds, each every its renew period, and the
// extra events, for d of the clock; after each it fails the test if two
// of the members Work one slot while either may admit a reconcile of it.
type play struct {
	s      *server
	ms     []*Member
	next   map[*Member]time.Time
	events []*event
}

type event struct {
	every time.Duration
	next  time.Time
	run   func()
}

func (s *server) play(ms ...*Member) *play {
	p := &play{s: s, ms: ms, next: map[*Member]time.Time{}}
	for _, m := range ms {
		p.next[m] = s.clock()
	}
	return p
}

// kill takes m out of the play: it never runs again, and admits nothing.
func (p *play) kill(m *Member) {
	delete(p.next, m)
	p.ms = slices.DeleteFunc(p.ms, func(c *Member) bool { return c == m })
}

// each runs f every period of the clock from now on.
func (p *play) each(period time.Duration, f func()) *event {
	e := &event{every: period, next: p.s.clock(), run: f}
	p.events = append(p.events, e)
	return e
}

func (p *play) run(d time.Duration, when string) {
	p.s.t.Helper()
	end := p.s.clock().Add(d)
	for {
		var m *Member
		at := end
		for _, c := range p.ms {
			if n, ok := p.next[c]; ok && n.Before(at) {
				m, at = c, n
			}
		}
		var e *event
		for _, c := range p.events {
			if c.next.Before(at) {
				m, e, at = nil, c, c.next
			}
		}
		if m == nil && e == nil {
			p.s.set(end)
			return
		}
		p.s.set(at)
		if e != nil {
			e.run()
			e.next = at.Add(e.every)
		} else {
			m.round(p.s.ctx, klog.Background())
			p.next[m] = at.Add(m.cfg.RenewPeriod)
		}
		noSplit(p.s.t, when, p.ms...)
	}
}
