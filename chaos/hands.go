package chaos

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"rawwatch/ring"
)

// Writes by others to the ring's Leases, straight to the API server (not
// through the fault proxy), during a sharded run's faults: what a GitOps
// tool, a policy engine or an operator does to Leases it does not own. None
// of them may change who is live, and none may make two replicas work one
// slot or lose a deletion:
//
//   - every second, a label on every Lease of the ring (its resourceVersion
//     moves; its holder's record does not);
//   - at handsAt[0] of the run, the leaving mark written by hand on a live
//     replica's Lease, as an operator draining it would ("true": not the
//     holder's mark);
//   - at handsAt[1], a live replica's holderIdentity cleared;
//   - at handsAt[2], a copy of a live replica's Lease under another name,
//     which stands still (two Leases naming one holder), until the ring
//     collects it.
type hands struct {
	leases kubernetes.Interface
	ns     string
	logf   func(string, ...any)
}

// handsAt: when the one-off writes come, as fractions of the run.
var handsAt = [3]float64{0.2, 0.25, 0.35}

// ringName is the ring the chaos run's replicas share (app.Sharding's
// default).
const ringName = "rawwatch"

func newHands(cfg *rest.Config, ns string, logf func(string, ...any)) (*hands, error) {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &hands{leases: kube, ns: ns, logf: logf}, nil
}

// run writes until ctx ends, which lasts about d; it returns what it did.
func (h *hands) run(ctx context.Context, d time.Duration, live func() []string) (labels int, did []string) {
	start := time.Now()
	next := 0
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return labels, did
		case <-tick.C:
		}
		labels += h.label(ctx)
		if next < len(handsAt) && time.Since(start) >= at(d, handsAt[next]) {
			if ids := live(); len(ids) > 0 {
				if what := h.once(ctx, next, ids[0]); what != "" {
					h.logf("a hand on the ring's Leases: %s", what)
					did = append(did, fmt.Sprintf("%s at %s", what, time.Since(start).Round(time.Second)))
				}
			}
			next++
		}
	}
}

// label labels every Lease of the ring; it says how many it wrote (a
// conflict with a renewal is skipped: the next second tries again).
func (h *hands) label(ctx context.Context) (n int) {
	leases := h.leases.CoordinationV1().Leases(h.ns)
	list, err := leases.List(ctx, metav1.ListOptions{LabelSelector: ring.Label + "=" + ringName})
	if err != nil {
		return 0
	}
	for _, l := range list.Items {
		l.Labels["chaos.example.com/touched"] = fmt.Sprint(time.Now().Unix())
		if _, err := leases.Update(ctx, &l, metav1.UpdateOptions{}); err == nil {
			n++
		}
	}
	return n
}

// once makes the i-th one-off write on replica id's Lease.
func (h *hands) once(ctx context.Context, i int, id string) string {
	leases := h.leases.CoordinationV1().Leases(h.ns)
	name := ringName + "." + id
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	var what string
	switch i {
	case 0:
		what = "marked " + name + " leaving by hand"
		l.Annotations[ring.AnnotationLeaving] = "true"
	case 1:
		what = "cleared " + name + "'s holder"
		l.Spec.HolderIdentity = nil
	case 2:
		what = "copied " + name + " as " + name + "-copy"
		c := l.DeepCopy()
		c.ObjectMeta = metav1.ObjectMeta{Name: name + "-copy", Namespace: h.ns, Labels: l.Labels, Annotations: l.Annotations}
		if _, err := leases.Create(ctx, c, metav1.CreateOptions{}); err != nil {
			return ""
		}
		return what
	}
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		return ""
	}
	return what
}
