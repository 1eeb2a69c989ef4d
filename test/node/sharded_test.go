package node

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"rawwatch/internal/testkit"
	"rawwatch/ring"
	"rawwatch/shard"
)

// config/sharded runs three replicas that divide the objects: each object's
// status is written by one pod, the three pods each write some, and their
// ring Leases claim disjoint slots that together cover all of them.
func TestShardedReplicasDivideTheObjects(t *testing.T) {
	needNode(t)
	deploy(t, "config/sharded", deployedTagOr(tagA))
	if n := len(controllerPods(t)); n != 3 {
		t.Fatalf("%d sharded replicas, want 3", n)
	}
	ns := testkit.Namespace(t, cluster.Config())
	start := time.Now()
	testkit.Objects(t, mr, ns, "obj", 300)
	waitProcessed(t, ns, 300, 2*time.Minute)

	byPod := map[string]int{}
	writers := map[string][]string{}
	for _, e := range statusUpdates(t, ns, start) {
		byPod[e.pod]++
		if !slices.Contains(writers[e.name], e.pod) {
			writers[e.name] = append(writers[e.name], e.pod)
		}
	}
	for name, pods := range writers {
		if len(pods) > 1 {
			t.Errorf("%s's status was written by %d pods: %v", name, len(pods), pods)
		}
	}
	t.Logf("status writes by pod: %v", byPod)
	if len(byPod) != 3 || len(writers) != 300 {
		t.Errorf("the statuses of %d objects were written by %d pods, want 300 by 3", len(writers), len(byPod))
	}
	waitUntil(t, time.Minute, func() (bool, string) {
		leases := ringLeases(t)
		var all shard.SlotSet
		overlap := 0
		for _, l := range leases {
			overlap += all.And(l.working).Len()
			all = all.Union(l.working)
		}
		return len(leases) == 3 && overlap == 0 && all.Len() == shard.Slots,
			fmt.Sprintf("%d ring Leases working %d of %d slots, %d claimed twice", len(leases), all.Len(), shard.Slots, overlap)
	})
}

// A rolling update of config/sharded to a new image tag, with objects
// deleted and created all through it, judged from the real pods' logs and
// ring Leases (every version of every Lease, from one watch) by the rules
// docs/sharding.md states for a clean leave (it hands its slots over
// before it lets them go: no deletion falls between two owners):
//   - a deletion is handled when a pod logs "MyResource deleted" with its UID;
//   - one not handled is lost, and fails the test;
//   - no Lease version shows a slot worked (claimed, not pending) by two
//     pods at once.
//
// Deletions handled twice (the old owner's sweep and the new owner that
// held it, a few seconds apart) are counted, not failed: handling a
// deletion is idempotent, and the claims never overlap.
func TestAShardedRollingUpdateLosesNoDeletion(t *testing.T) {
	needNode(t)
	deploy(t, "config/sharded", tagA)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := testkit.Namespace(t, cluster.Config())
	testkit.Objects(t, mr, ns, "obj", 300)
	waitProcessed(t, ns, 300, 2*time.Minute)

	logs := followControllerLogs(ctx, t)
	claims := watchRing(ctx, t)

	// Churn: delete the first 200 objects one by one and create as many,
	// spread over the rollout.
	type deletion struct {
		uid string
		at  time.Time
	}
	churned := make(chan []deletion)
	go func() {
		var ds []deletion
		for i := range 200 {
			o, err := mr.Get(ctx, ns, fmt.Sprintf("obj-%d", i))
			if err == nil {
				err = mr.Delete(ctx, ns, o.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &o.UID}})
			}
			if err == nil {
				ds = append(ds, deletion{string(o.UID), time.Now()})
				_, err = mr.Create(ctx, testkit.New(ns, fmt.Sprintf("new-%d", i), "created during the rollout"))
			}
			if err != nil {
				t.Errorf("churn: %v", err)
				break
			}
			time.Sleep(150 * time.Millisecond)
		}
		churned <- ds
	}()
	start := time.Now()
	deploy(t, "config/sharded", tagB)
	took := time.Since(start)
	deleted := <-churned
	waitProcessed(t, ns, 300, 3*time.Minute)

	// Wait for the handling to settle: every deletion handled, or none more
	// for 15 s.
	handled := func() map[string][]string {
		by := map[string][]string{}
		for pod, log := range logs.snapshot() {
			for _, l := range strings.Split(log, "\n") {
				if i := strings.Index(l, `"MyResource deleted"`); i >= 0 {
					if _, rest, ok := strings.Cut(l[i:], ` uid="`); ok {
						uid, _, _ := strings.Cut(rest, `"`)
						by[uid] = append(by[uid], pod)
					}
				}
			}
		}
		return by
	}
	var by map[string][]string
	count := func() int {
		n := 0
		for _, d := range deleted {
			if len(by[d.uid]) > 0 {
				n++
			}
		}
		return n
	}
	last, lastChange := -1, time.Now()
	for {
		by = handled()
		if n := count(); n != last {
			last, lastChange = n, time.Now()
		}
		if last == len(deleted) || time.Since(lastChange) > 15*time.Second {
			break
		}
		time.Sleep(time.Second)
	}

	var lost, twice []string
	for _, d := range deleted {
		switch pods := by[d.uid]; {
		case len(pods) > 1:
			twice = append(twice, d.uid)
		case len(pods) == 0:
			lost = append(lost, fmt.Sprintf("%s (slot %d, deleted at %s)", d.uid, shard.SlotOf(d.uid), d.at.Format("15:04:05.000")))
		}
	}
	versions, worked := claims.verdict()
	t.Logf("sharded rolling update rawwatch:%s -> rawwatch:%s in %s, %d deletions during it: %d handled (%d by two pods), %d lost; %d ring Lease versions, %d show a slot worked by two pods",
		tagA, tagB, took.Round(time.Second), len(deleted), len(deleted)-len(lost), len(twice), len(lost), versions, len(worked))
	if len(lost) > 0 || len(worked) > 0 {
		logs.save(t)
	}
	for pod, log := range logs.snapshot() {
		if strings.Contains(log, "Leaving the ring with") {
			t.Logf("%s's log says it left the ring with deletions or slots not handed over (\"Leaving the ring with …\")", pod)
		}
	}
	for _, l := range lost {
		t.Errorf("deletion lost: %s", l)
	}
	if len(worked) > 0 {
		t.Errorf("slots worked by two pods at once: %v", worked)
	}
}

// ringLease is one ring member's Lease as the test reads it: the slots it
// works (claimed, not pending).
type ringLease struct {
	name    string
	working shard.SlotSet
}

func parseRingLease(t *testing.T, l *coordinationv1.Lease) ringLease {
	slots, err1 := shard.ParseSlotSet(l.Annotations[ring.AnnotationSlots])
	pending, err2 := shard.ParseSlotSet(l.Annotations[ring.AnnotationPending])
	if err1 != nil || err2 != nil {
		t.Errorf("Lease %s: slots %q pending %q: %v %v", l.Name, l.Annotations[ring.AnnotationSlots], l.Annotations[ring.AnnotationPending], err1, err2)
	}
	return ringLease{name: l.Name, working: slots.Minus(pending)}
}

func ringLeases(t *testing.T) []ringLease {
	list, err := kube.CoordinationV1().Leases(systemNS).List(context.Background(), metav1.ListOptions{LabelSelector: ring.Label + "=rawwatch"})
	if err != nil {
		t.Fatal(err)
	}
	var out []ringLease
	for i := range list.Items {
		out = append(out, parseRingLease(t, &list.Items[i]))
	}
	return out
}

// ringHistory holds every version of the ring's Leases, in the order etcd
// wrote them (one watch), when the test saw each, and checks each state they
// add up to.
type ringHistory struct {
	mu       sync.Mutex
	t        *testing.T
	current  map[string]shard.SlotSet // Lease: working slots
	versions int
	worked   []string
}

func watchRing(ctx context.Context, t *testing.T) *ringHistory {
	h := &ringHistory{t: t, current: map[string]shard.SlotSet{}}
	list, err := kube.CoordinationV1().Leases(systemNS).List(ctx, metav1.ListOptions{LabelSelector: ring.Label + "=rawwatch"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		h.apply(watch.Added, &list.Items[i])
	}
	w, err := kube.CoordinationV1().Leases(systemNS).Watch(ctx, metav1.ListOptions{LabelSelector: ring.Label + "=rawwatch", ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for ev := range w.ResultChan() {
			if l, ok := ev.Object.(*coordinationv1.Lease); ok {
				h.apply(ev.Type, l)
			} else if ev.Type == watch.Error {
				h.mu.Lock()
				h.worked = append(h.worked, fmt.Sprintf("the Lease watch broke: %v", ev.Object))
				h.mu.Unlock()
			}
		}
	}()
	return h
}

func (h *ringHistory) apply(typ watch.EventType, l *coordinationv1.Lease) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.versions++
	if typ == watch.Deleted {
		delete(h.current, l.Name)
		return
	}
	h.current[l.Name] = parseRingLease(h.t, l).working
	var names []string
	for n := range h.current {
		names = append(names, n)
	}
	sort.Strings(names)
	for i, a := range names {
		for _, b := range names[i+1:] {
			if both := h.current[a].And(h.current[b]); !both.Empty() {
				h.worked = append(h.worked, fmt.Sprintf("at resourceVersion %s: slots %s worked by %s and %s", l.ResourceVersion, both, a, b))
			}
		}
	}
}

func (h *ringHistory) verdict() (versions int, worked []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.versions, slices.Clone(h.worked)
}

// podLogs follows the log of every controller pod, old and new, from its
// start until it ends: a deleted pod's log is gone from the API with it.
type podLogs struct {
	mu   sync.Mutex
	logs map[string]*strings.Builder
}

func (l *podLogs) snapshot() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]string{}
	for k, v := range l.logs {
		out[k] = v.String()
	}
	return out
}

// save writes every followed log to the node's directory, for a failed
// test's reader.
func (l *podLogs) save(t *testing.T) {
	dir := filepath.Join(cluster.Dir, "followed-logs")
	_ = os.MkdirAll(dir, 0o755)
	for pod, log := range l.snapshot() {
		_ = os.WriteFile(filepath.Join(dir, pod+".log"), []byte(log), 0o644)
	}
	t.Logf("the controller pods' logs are in %s", dir)
}

func followControllerLogs(ctx context.Context, t *testing.T) *podLogs {
	l := &podLogs{logs: map[string]*strings.Builder{}}
	w, err := kube.CoreV1().Pods(systemNS).Watch(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=rawwatch,app.kubernetes.io/component=controller"})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Waiting != nil {
				continue
			}
			l.mu.Lock()
			_, following := l.logs[p.Name]
			if !following {
				l.logs[p.Name] = &strings.Builder{}
			}
			l.mu.Unlock()
			if !following {
				go l.follow(ctx, p.Name)
			}
		}
	}()
	return l
}

func (l *podLogs) follow(ctx context.Context, pod string) {
	r, err := kube.CoreV1().Pods(systemNS).GetLogs(pod, &corev1.PodLogOptions{Container: "rawwatch", Follow: true}).Stream(ctx)
	if err != nil {
		return
	}
	defer r.Close()
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		l.mu.Lock()
		l.logs[pod].WriteString(line)
		l.mu.Unlock()
		if err == io.EOF || err != nil {
			return
		}
	}
}

// statusUpdate is one status write the audit log recorded.
type statusUpdate struct{ pod, name string }

// statusUpdates are the controller's status writes of ns's MyResources
// since since, from the apiserver's audit log.
func statusUpdates(t *testing.T, ns string, since time.Time) []statusUpdate {
	t.Helper()
	var out []statusUpdate
	for _, e := range auditEvents(t, since) {
		if e.ObjectRef.Resource == "myresources" && e.ObjectRef.Subresource == "status" && e.ObjectRef.Namespace == ns &&
			(e.Verb == "update" || e.Verb == "patch") && e.ResponseStatus.Code < 300 {
			if p := e.User.Extra["authentication.kubernetes.io/pod-name"]; len(p) == 1 {
				out = append(out, statusUpdate{pod: p[0], name: e.ObjectRef.Name})
			}
		}
	}
	return out
}
