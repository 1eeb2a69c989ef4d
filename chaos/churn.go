package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"rawwatch/client"
	"rawwatch/internal/testkit"
	"rawwatch/store"
)

// incarnation is one object: a key and a UID (a re-created name is another
// object, with another UID).
type incarnation struct {
	Key string
	UID types.UID
}

// deletion is one object the churner deleted, and the resourceVersion it was
// created at (0 for the initial objects).
type deletion struct {
	incarnation
	Created int64
	// At is when the server answered the DELETE.
	At time.Time
}

// churner changes the objects of one namespace at a steady rate, as users
// would: spec updates (each a new generation for the controller to observe),
// deletions, and creations — half of them re-creating a name deleted a
// moment ago, so that one key comes back as a new object. It writes to an
// apiserver of its own, not through the fault proxy: the faults are the
// controller's problem, and the churner must know exactly what it did.
type churner struct {
	c       *client.Client
	ns      string
	target  int // population it keeps close to
	limiter *rate.Limiter

	mu      sync.Mutex
	free    []string // live names no writer is working on
	busy    int      // live names a writer holds
	uids    map[string]types.UID
	created map[string]int64 // resourceVersion each live name was created at
	gone    []string         // deleted names, free to re-create
	next    int              // suffix for new names
	deleted []deletion
	errs    []error

	creates, recreates, updates, deletes, conflicts atomic.Int64
}

func newChurner(c *client.Client, ns string, target int, opsPerSecond float64) *churner {
	return &churner{c: c, ns: ns, target: target, uids: map[string]types.UID{}, created: map[string]int64{},
		limiter: rate.NewLimiter(rate.Limit(opsPerSecond), 1)}
}

// populate creates the initial objects, obj-0 … obj-(n-1).
func (ch *churner) populate(ctx context.Context, n int) error {
	if err := testkit.CreateMany(ctx, ch.c, ch.ns, "obj", n); err != nil {
		return err
	}
	list, err := ch.c.List(ctx, ch.ns, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, o := range list.Items {
		ch.uids[o.Name] = o.UID
		ch.free = append(ch.free, o.Name)
	}
	ch.next = n
	return nil
}

// run churns with writers goroutines until ctx ends.
func (ch *churner) run(ctx context.Context, writers int) {
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for ctx.Err() == nil {
				if ch.limiter.Wait(ctx) != nil {
					return
				}
				if err := ch.step(context.WithoutCancel(ctx)); err != nil {
					ch.mu.Lock()
					ch.errs = append(ch.errs, err)
					ch.mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
}

// step makes one change: 55% updates, 20% deletions, 20% creations, shifted
// towards creations or deletions when the population drifts from its target,
// and 5% replacements: a deletion followed at once by a creation under the
// same name (kubectl replace --force), the way one key most often comes back
// as another object.
func (ch *churner) step(ctx context.Context) error {
	ch.mu.Lock()
	live := len(ch.free) + ch.busy
	ch.mu.Unlock()
	pDelete, pCreate := 0.2, 0.2
	switch {
	case live > ch.target*105/100:
		pDelete, pCreate = 0.4, 0
	case live < ch.target*95/100:
		pDelete, pCreate = 0, 0.4
	}
	switch r := rand.Float64(); {
	case r < pCreate:
		return ch.create(ctx)
	case r < pCreate+pDelete:
		return ch.withLive(func(name string, uid types.UID) (bool, error) { return false, ch.delete(ctx, name, uid) })
	case r < pCreate+pDelete+0.05:
		return ch.withLive(func(name string, uid types.UID) (bool, error) { return true, ch.replace(ctx, name, uid) })
	default:
		return ch.withLive(func(name string, _ types.UID) (bool, error) { return true, ch.update(ctx, name) })
	}
}

// withLive lends a live name to f, which says whether the name still exists after it.
func (ch *churner) withLive(f func(name string, uid types.UID) (stillLive bool, err error)) error {
	ch.mu.Lock()
	if len(ch.free) == 0 {
		ch.mu.Unlock()
		return nil
	}
	i := rand.IntN(len(ch.free))
	name := ch.free[i]
	ch.free[i] = ch.free[len(ch.free)-1]
	ch.free = ch.free[:len(ch.free)-1]
	ch.busy++
	uid := ch.uids[name]
	ch.mu.Unlock()

	live, err := f(name, uid)
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.busy--
	if live || err != nil {
		ch.free = append(ch.free, name)
	} else {
		ch.gone = append(ch.gone, name)
		delete(ch.uids, name)
	}
	return err
}

func (ch *churner) create(ctx context.Context) error {
	ch.mu.Lock()
	var name string
	recreate := len(ch.gone) > 0 && rand.IntN(2) == 0
	if recreate {
		i := rand.IntN(len(ch.gone))
		name = ch.gone[i]
		ch.gone[i] = ch.gone[len(ch.gone)-1]
		ch.gone = ch.gone[:len(ch.gone)-1]
	} else {
		name = fmt.Sprintf("obj-%d", ch.next)
		ch.next++
	}
	ch.busy++
	ch.mu.Unlock()

	obj, err := ch.c.Create(ctx, testkit.New(ch.ns, name, "created"))
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.busy--
	if err != nil {
		ch.gone = append(ch.gone, name)
		return fmt.Errorf("creating %s: %w", name, err)
	}
	ch.uids[name], ch.created[name] = obj.UID, revision(obj.ResourceVersion)
	ch.free = append(ch.free, name)
	ch.creates.Add(1)
	if recreate {
		ch.recreates.Add(1)
	}
	return nil
}

// update changes the spec (a new generation), retrying on conflicts: the
// controller writes the status of the same objects all the time.
func (ch *churner) update(ctx context.Context, name string) error {
	for range 10 {
		o, err := ch.c.Get(ctx, ch.ns, name)
		if err != nil {
			return fmt.Errorf("reading %s: %w", name, err)
		}
		o.Spec.Message = fmt.Sprintf("generation %d", o.Generation+1)
		_, err = ch.c.Update(ctx, o)
		if apierrors.IsConflict(err) {
			ch.conflicts.Add(1)
			continue
		}
		if err != nil {
			return fmt.Errorf("updating %s: %w", name, err)
		}
		ch.updates.Add(1)
		return nil
	}
	return fmt.Errorf("updating %s: 10 conflicts in a row", name)
}

// replace deletes name and creates it again at once: same key, new UID.
func (ch *churner) replace(ctx context.Context, name string, uid types.UID) error {
	if err := ch.delete(ctx, name, uid); err != nil {
		return err
	}
	obj, err := ch.c.Create(ctx, testkit.New(ch.ns, name, "replaced"))
	if err != nil {
		return fmt.Errorf("re-creating %s: %w", name, err)
	}
	ch.mu.Lock()
	ch.uids[name], ch.created[name] = obj.UID, revision(obj.ResourceVersion)
	ch.mu.Unlock()
	ch.creates.Add(1)
	ch.recreates.Add(1)
	return nil
}

func (ch *churner) delete(ctx context.Context, name string, uid types.UID) error {
	err := ch.c.Delete(ctx, ch.ns, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil {
		return fmt.Errorf("deleting %s: %w", name, err)
	}
	ch.mu.Lock()
	ch.deleted = append(ch.deleted, deletion{incarnation{store.Key(ch.ns, name), uid}, ch.created[name], time.Now()})
	delete(ch.created, name)
	ch.mu.Unlock()
	ch.deletes.Add(1)
	return nil
}

// deletions returns every deletion made so far.
func (ch *churner) deletions() []deletion {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return append([]deletion(nil), ch.deleted...)
}

func (ch *churner) errors() []error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return append([]error(nil), ch.errs...)
}

// revision reads a resourceVersion as the etcd revision it is. Clients must
// treat resourceVersions as opaque; this harness knows its server.
func revision(rv string) int64 {
	n, _ := strconv.ParseInt(rv, 10, 64)
	return n
}
