// Package ring keeps the membership of a sharded controller's replicas on
// Kubernetes' own primitive for it, Leases: each replica holds one Lease in
// the ring's namespace and renews it; the live members are the replicas whose
// Lease keeps being renewed. Package shard turns the members into each one's
// hash ranges; the same members give every replica the same answer.
//
//	Lease <ring>-<identity>   labels: rawwatch.example.com/ring=<ring>
//	  holderIdentity: <identity>, leaseDurationSeconds, renewTime
//
// A member:
//   - creates its Lease, then renews it every RenewPeriod (a write, so its
//     resourceVersion moves);
//   - lists the ring's Leases every RenewPeriod, and takes as live every
//     Lease whose resourceVersion it saw move within LeaseDuration, judged on
//     its own clock (as client-go's leader election does), its own included
//     only while its renewals succeed; a Lease seen for the first time with a
//     renewTime two lease durations old is taken as a dead member's at once
//     (the one place the clocks are compared, with that much slack);
//   - deletes its Lease when it leaves cleanly, so the others see it gone at
//     their next list instead of a LeaseDuration later.
//
// The bounds: a member that joins is seen by the others within one
// RenewPeriod (plus a request); one that leaves cleanly, the same; one that
// dies or is cut off, within LeaseDuration plus a RenewPeriod. A member that
// cannot renew for LeaseDuration counts itself out at the same time the
// others do, so it never goes on believing it owns what they have handed to
// someone else (the fence the handoff builds on).
//
// The Lease API failing (500s, timeouts) is a member that cannot renew or
// cannot see: its view stays as it was until a Lease expires, and it retries
// every RenewPeriod; nothing is retried faster.
package ring

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Label marks a Lease as a member of the ring named by its value.
const Label = "rawwatch.example.com/ring"

// Defaults of Config.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewPeriod   = 2 * time.Second
)

// Config says which ring to join, as whom.
type Config struct {
	Client    kubernetes.Interface
	Namespace string
	// Ring names the ring: replicas of one controller share it.
	Ring string
	// Identity names this member; unique in the ring (the pod's name).
	Identity string
	// LeaseDuration: a member whose Lease was not renewed for this long is
	// out. RenewPeriod: how often Leases are renewed and listed. Defaults
	// DefaultLeaseDuration and DefaultRenewPeriod.
	LeaseDuration, RenewPeriod time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// A Member is this replica's place in the ring.
type Member struct {
	cfg Config

	mu      sync.Mutex
	seen    map[string]observed // by identity, the other members' Leases
	renewed time.Time           // when our last renewal succeeded
	members []string            // the live members, sorted
	changed chan struct{}       // closed and replaced when members change
}

type observed struct {
	rv string
	at time.Time // when we saw rv first
}

// New returns a member; it joins when Run starts.
func New(cfg Config) (*Member, error) {
	if cfg.Client == nil || cfg.Namespace == "" || cfg.Ring == "" || cfg.Identity == "" {
		return nil, fmt.Errorf("ring: Client, Namespace, Ring and Identity are required")
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.RenewPeriod <= 0 {
		cfg.RenewPeriod = DefaultRenewPeriod
	}
	if cfg.RenewPeriod >= cfg.LeaseDuration {
		return nil, fmt.Errorf("ring: RenewPeriod %s must be shorter than LeaseDuration %s", cfg.RenewPeriod, cfg.LeaseDuration)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Member{cfg: cfg, seen: map[string]observed{}, changed: make(chan struct{})}, nil
}

// Members returns the live members, sorted; this one is among them only
// while its renewals succeed.
func (m *Member) Members() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.members)
}

// Changed returns a channel closed at the next change of Members.
func (m *Member) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

func (m *Member) leaseName() string { return m.cfg.Ring + "-" + m.cfg.Identity }

// Run holds the membership until ctx ends, then leaves: it deletes its Lease
// (one try, bounded by a RenewPeriod) and returns.
func (m *Member) Run(ctx context.Context) {
	log := klog.FromContext(ctx).WithName("ring")
	tick := time.NewTicker(m.cfg.RenewPeriod)
	defer tick.Stop()
	for {
		if err := m.renew(ctx); err != nil && ctx.Err() == nil {
			log.Error(err, "Could not renew the ring's Lease", "lease", m.leaseName())
		}
		if err := m.look(ctx); err != nil && ctx.Err() == nil {
			log.Error(err, "Could not list the ring's Leases")
		}
		m.update(log)
		select {
		case <-ctx.Done():
			m.leave(log)
			return
		case <-tick.C:
		}
	}
}

func (m *Member) request(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, m.cfg.RenewPeriod)
}

// renew creates or renews this member's Lease.
func (m *Member) renew(ctx context.Context) error {
	ctx, cancel := m.request(ctx)
	defer cancel()
	leases := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace)
	now := metav1.NewMicroTime(m.cfg.Now())
	secs := int32((m.cfg.LeaseDuration + time.Second - 1) / time.Second)
	id := m.cfg.Identity
	lease, err := leases.Get(ctx, m.leaseName(), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: m.leaseName(), Namespace: m.cfg.Namespace, Labels: map[string]string{Label: m.cfg.Ring}},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &id, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now},
		}
		_, err = leases.Create(ctx, lease, metav1.CreateOptions{})
	case err == nil:
		if h := lease.Spec.HolderIdentity; h != nil && *h != id {
			return fmt.Errorf("lease %s is held by %q, not %q: two members with one identity", m.leaseName(), *h, id)
		}
		lease.Spec.RenewTime, lease.Spec.LeaseDurationSeconds = &now, &secs
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	}
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.renewed = m.cfg.Now()
	m.mu.Unlock()
	return nil
}

// look lists the ring's Leases and notes which moved.
func (m *Member) look(ctx context.Context) error {
	ctx, cancel := m.request(ctx)
	defer cancel()
	list, err := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace).List(ctx,
		metav1.ListOptions{LabelSelector: Label + "=" + m.cfg.Ring})
	if err != nil {
		return err
	}
	now := m.cfg.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	present := map[string]bool{}
	for _, l := range list.Items {
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == m.cfg.Identity {
			continue
		}
		id := *l.Spec.HolderIdentity
		present[id] = true
		o, ok := m.seen[id]
		switch {
		case !ok && l.Spec.RenewTime != nil && now.Sub(l.Spec.RenewTime.Time) > 2*m.cfg.LeaseDuration:
			// First seen, and by its own clock not renewed for two lease
			// durations: a member that died, not one that just joined.
			m.seen[id] = observed{rv: l.ResourceVersion, at: now.Add(-m.cfg.LeaseDuration)}
		case !ok || o.rv != l.ResourceVersion:
			m.seen[id] = observed{rv: l.ResourceVersion, at: now}
		}
	}
	for id := range m.seen { // deleted: left cleanly
		if !present[id] {
			delete(m.seen, id)
		}
	}
	return nil
}

// update recomputes the live members from what was observed.
func (m *Member) update(log klog.Logger) {
	now := m.cfg.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var live []string
	if !m.renewed.IsZero() && now.Sub(m.renewed) < m.cfg.LeaseDuration {
		live = append(live, m.cfg.Identity)
	}
	for id, o := range m.seen {
		if now.Sub(o.at) < m.cfg.LeaseDuration {
			live = append(live, id)
		}
	}
	slices.Sort(live)
	if slices.Equal(live, m.members) {
		return
	}
	log.Info("Ring members changed", "members", live, "before", m.members)
	m.members = live
	close(m.changed)
	m.changed = make(chan struct{})
}

// leave deletes this member's Lease, so that the others see it gone now.
func (m *Member) leave(log klog.Logger) {
	ctx, cancel := m.request(context.Background())
	defer cancel()
	err := m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace).Delete(ctx, m.leaseName(), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		log.Error(err, "Could not delete the ring's Lease on leaving: the others see it expire", "lease", m.leaseName())
	}
	m.mu.Lock()
	m.members, m.renewed = nil, time.Time{}
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
}
