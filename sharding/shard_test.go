package sharding_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"rawwatch/api/v1alpha1"
	"rawwatch/compare"
	"rawwatch/internal/testkit"
	"rawwatch/shard"
	"rawwatch/sharding"
	"rawwatch/store"
	"rawwatch/watcher"
)

// metered is cfg with c counting the response bytes read through it.
func metered(cfg *rest.Config, c *compare.ByteCounter) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(c.Wrap)
	return cfg
}

// shardsOf runs one watcher per member of a three-member ring against cfg,
// and returns them with the byte count of each.
func shardsOf(t *testing.T, cfg *rest.Config, ns string) (map[string]*running, map[string]*compare.ByteCounter, map[string]shard.Set) {
	t.Helper()
	members := []string{"rawwatch-a", "rawwatch-b", "rawwatch-c"}
	owners := shard.Assign(members)
	runs, bytes, sets := map[string]*running{}, map[string]*compare.ByteCounter{}, map[string]shard.Set{}
	for _, m := range members {
		bytes[m] = &compare.ByteCounter{}
		sets[m] = shard.Of(owners[m])
		runs[m] = start(t, metered(cfg, bytes[m]), ns, sets[m], watcher.Options[object]{PageSize: 50})
	}
	return runs, bytes, sets
}

// checkPartition: every object on the server is in exactly one store, the
// store of the member whose ranges hold its UID's hash.
func checkPartition(t *testing.T, runs map[string]*running, sets map[string]shard.Set, want int) {
	t.Helper()
	seen := map[string]string{}
	for m, r := range runs {
		for _, o := range r.store.List() {
			key := store.KeyOf(o)
			if other, dup := seen[key]; dup {
				t.Errorf("%s is in the stores of %s and %s", key, other, m)
			}
			seen[key] = m
			if !sets[m].Contains(string(o.GetUID())) {
				t.Errorf("%s (uid %s) is in %s's store, outside its ranges", key, o.GetUID(), m)
			}
		}
	}
	if len(seen) != want {
		t.Errorf("the stores hold %d objects in all, want %d", len(seen), want)
	}
}

// Three members split 300 objects on the server (ShardedListAndWatch on):
// each store holds its share, none twice, none missed; live creates and
// deletes reach only their owner; nothing is filtered on the client, and each
// member reads about a third of the bytes one unsharded watcher reads.
func TestShardSelectorsSplitTheObjectsOnTheServer(t *testing.T) {
	cp, ns, c := testkit.Parallel(t)
	ctx := context.Background()
	testkit.Objects(t, c, ns, "obj", 300)
	var whole compare.ByteCounter
	single := start(t, metered(cp.Config(), &whole), ns, nil, watcher.Options[object]{PageSize: 50})
	runs, bytes, sets := shardsOf(t, cp.Config(), ns)
	checkPartition(t, runs, sets, 300)

	testkit.Objects(t, c, ns, "late", 30)
	for i := range 10 {
		if err := c.Delete(ctx, ns, fmt.Sprintf("obj-%d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	total := func() int {
		n := 0
		for _, r := range runs {
			n += r.store.Len()
		}
		return n
	}
	testkit.Eventually(t, 30*time.Second, func() bool { return total() == 320 && single.store.Len() == 320 },
		"the shards hold %d objects in all, want 320", total())
	checkPartition(t, runs, sets, 320)
	var sum int64
	for m, r := range runs {
		if n := r.w.OutOfShard(); n != 0 {
			t.Errorf("%s filtered %d objects on the client: the server ignored its selector", m, n)
		}
		share := float64(bytes[m].Read()) / float64(whole.Read())
		t.Logf("%s: %.3f of the ranges, %d objects, %d bytes read (%.2f of one unsharded watcher's %d)",
			m, sets[m].Fraction(), r.store.Len(), bytes[m].Read(), share, whole.Read())
		if share > 0.5 {
			t.Errorf("%s read %.2f of the bytes of an unsharded watcher, want about a third", m, share)
		}
		sum += bytes[m].Read()
	}
	t.Logf("three shards read %d bytes in all, one unsharded watcher %d", sum, whole.Read())
}

// An apiserver without the gate drops the selector and sends everything: the
// members notice (objects outside their ranges), filter on their side with the
// same hash, and the stores split the objects all the same.
func TestShardsFallBackToClientFilteringWhenTheServerDropsTheSelector(t *testing.T) {
	cp, ns, c := testkit.Parallel(t)
	old := testkit.APIServer(t, cp, "apiserver-no-shards", "--feature-gates=ShardedListAndWatch=false")
	testkit.Objects(t, c, ns, "obj", 120)
	logs := &testkit.Logs{}
	members := []string{"rawwatch-a", "rawwatch-b", "rawwatch-c"}
	owners := shard.Assign(members)
	runs, sets := map[string]*running{}, map[string]shard.Set{}
	for _, m := range members {
		sets[m] = shard.Of(owners[m])
		runs[m] = startLogging(t, old.Config(), ns, sets[m], watcher.Options[object]{PageSize: 50}, logs.Logger(0))
	}
	checkPartition(t, runs, sets, 120)
	testkit.Objects(t, c, ns, "late", 12)
	testkit.Eventually(t, 30*time.Second, func() bool {
		n := 0
		for _, r := range runs {
			n += r.store.Len()
		}
		return n == 132
	}, "the live creates did not reach their shards")
	checkPartition(t, runs, sets, 132)
	for m, r := range runs {
		if n := r.w.OutOfShard(); n < 120-int64(r.store.Len()) {
			t.Errorf("%s filtered %d objects on the client, want at least the %d of the others", m, n, 120-r.store.Len())
		}
	}
	if n := logs.Count("The server ignores shard selectors"); n != 3 {
		t.Errorf("%d log lines saying the server ignores the selector, want one per watcher:\n%s", n,
			strings.Join(logs.Grep("shard"), "\n"))
	}
}

// A running watcher moves from one shard to another (SetShard): its store
// ends with exactly the new shard's objects; the objects that left are
// dropped without a Deleted (they moved, they were not deleted), the ones
// that came are handed out as Added, and a real deletion made meanwhile is
// still reported. Both with the server filtering and, gate off, with the
// client filtering.
func TestSetShardMovesWithoutDeletions(t *testing.T) {
	cp, ns, c := testkit.Parallel(t)
	ctx := context.Background()
	old := testkit.APIServer(t, cp, "apiserver-no-shards-2", "--feature-gates=ShardedListAndWatch=false")
	testkit.Objects(t, c, ns, "obj", 200)
	var slotsA, slotsB []int
	for i := range shard.Slots {
		if i%2 == 0 {
			slotsA = append(slotsA, i)
		} else {
			slotsB = append(slotsB, i)
		}
	}
	a, b := shard.Of(slotsA), shard.Of(slotsB)
	for name, cfg := range map[string]*rest.Config{"gate on": cp.Config(), "gate off": old.Config()} {
		r := start(t, cfg, ns, a, watcher.Options[object]{PageSize: 30})
		inA := r.store.Len()
		before := r.rec.Len()
		r.w.SetShard(b)
		// (The count alone is not enough: with 100 objects in each shard,
		// it holds before the change too.)
		inB := func() bool {
			for _, o := range r.store.List() {
				if !b.Contains(string(o.GetUID())) {
					return false
				}
			}
			return true
		}
		testkit.Eventually(t, 30*time.Second, func() bool { return r.store.Len() == 200-inA && inB() },
			"%s: after SetShard the store holds %d objects (all in the new shard: %v), want the other %d", name, r.store.Len(), inB(), 200-inA)
		// The relist's deltas are handed out after it is in the store: wait
		// for them too (make test on a busy machine read none yet).
		addedSince := func() (n int) {
			for _, d := range r.rec.Since(before) {
				if d.Type == store.Added {
					n++
				}
			}
			return n
		}
		testkit.Eventually(t, 30*time.Second, func() bool { return addedSince() >= 200-inA },
			"%s: %d Added after SetShard, want %d", name, addedSince(), 200-inA)
		added := 0
		for _, d := range r.rec.Since(before) {
			switch d.Type {
			case store.Deleted:
				t.Errorf("%s: %s reported Deleted: it moved to another shard", name, d.Key)
			case store.Added:
				added++
			}
		}
		if added != 200-inA {
			t.Errorf("%s: %d Added after SetShard, want %d", name, added, 200-inA)
		}
		t.Logf("%s: %d objects in the first shard, %d in the second, %d handed out as Added", name, inA, 200-inA, added)
		// All slots, then a real deletion: reported.
		r.w.SetShard(shard.Of(append(slotsA, slotsB...)))
		testkit.Eventually(t, 30*time.Second, func() bool { return r.store.Len() == 200 }, "%s: the whole shard did not fill the store", name)
		victim := r.store.List()[0]
		if err := c.Delete(ctx, ns, victim.GetName(), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 30*time.Second, func() bool {
			_, ok := r.rec.Find(store.KeyOf(victim), store.Deleted)
			return ok
		}, "%s: a real deletion was not reported", name)
		testkit.Create(t, c, ns, victim.GetName(), "back")
	}
}

// Sweep finds what a watch that is behind has not brought: a watcher whose
// store was filled and never kept up (it does not run) sweeps half the
// slots after deletions, a re-created name and new objects. It reports, as
// FinalStateUnknown deletions, exactly the stored objects of those slots
// that are gone or were re-created (by UID), none outside the slots and no
// new object; the store is not touched. Gate on and off.
func TestSweepFindsTheDeletionsTheWatchHasNotBrought(t *testing.T) {
	t.Parallel()
	cp := testkit.Shared.Get(t)
	ctx := context.Background()
	old := testkit.APIServer(t, cp, "apiserver-no-shards-3", "--feature-gates=ShardedListAndWatch=false")
	var even []int
	for i := 0; i < shard.Slots; i += 2 {
		even = append(even, i)
	}
	slots := shard.SlotsOf(even...)
	for name, cfg := range map[string]*rest.Config{"gate on": cp.Config(), "gate off": old.Config()} {
		ns := testkit.Namespace(t, cp.Config())
		c := testkit.Client(t, cp.Config())
		testkit.Objects(t, c, ns, "obj", 120)
		// A store as a watcher left it, and a watcher that will not run.
		list, err := c.List(ctx, ns, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s := store.New[object]()
		for i := range list.Items {
			s.Upsert(&list.Items[i])
		}
		w := sharding.NewWatcher(watcher.RESTSource{Client: testkit.Client(t, cfg).REST(), Resource: v1alpha1.Resource, Namespace: ns}, s,
			watcher.Options[object]{PageSize: 25, Codec: codec}, slots.Set())
		if !w.Covered().Empty() {
			t.Errorf("%s: a watcher that never listed covers %v", name, w.Covered())
		}
		want := map[string]bool{} // the deletions the sweep must report
		recreated := ""
		for i, o := range list.Items {
			in := slots.Has(shard.SlotOf(string(o.UID)))
			switch {
			case i%7 == 0: // deleted
				if err := c.Delete(ctx, ns, o.Name, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				if in {
					want[store.KeyOf(&list.Items[i])] = true
				}
			case in && recreated == "": // deleted and created again: a new UID
				if err := c.Delete(ctx, ns, o.Name, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				testkit.Create(t, c, ns, o.Name, "again")
				recreated = store.KeyOf(&list.Items[i])
				want[recreated] = true
			}
		}
		testkit.Objects(t, c, ns, "new", 20)
		res, err := w.Sweep(ctx, slots)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// Where it listed, and the newest object of each slot: those of
		// a LIST made after it, of the objects of the swept slots.
		after, err := c.List(ctx, ns, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var newest [shard.Slots]uint64
		for _, o := range after.Items {
			if i := shard.SlotOf(string(o.UID)); slots.Has(i) {
				newest[i] = max(newest[i], sharding.ParseRV(o.ResourceVersion))
			}
		}
		if res.RV == 0 || res.RV > sharding.ParseRV(after.ResourceVersion) {
			t.Errorf("%s: swept at resourceVersion %d; the LIST after it was at %s", name, res.RV, after.ResourceVersion)
		}
		if res.Newest != newest {
			t.Errorf("%s: newest resourceVersion by slot %v, want %v", name, res.Newest, newest)
		}
		found := res.Deleted
		got := map[string]bool{}
		for _, d := range found {
			if d.Type != store.Deleted || !d.FinalStateUnknown {
				t.Errorf("%s: %s reported as %v (final state unknown %v), want a Deleted with its final state unknown", name, d.Key, d.Type, d.FinalStateUnknown)
			}
			if !slots.Has(shard.SlotOf(string(d.Object.GetUID()))) {
				t.Errorf("%s: %s reported, outside the swept slots", name, d.Key)
			}
			got[d.Key] = true
		}
		for key := range want {
			if !got[key] {
				t.Errorf("%s: the deletion of %s was not found", name, key)
			}
		}
		for key := range got {
			if !want[key] {
				t.Errorf("%s: %s reported deleted, but it is on the server", name, key)
			}
		}
		if s.Len() != 120 {
			t.Errorf("%s: the sweep changed the store: %d objects, want 120", name, s.Len())
		}
		t.Logf("%s: %d deletions found in half the slots (%s re-created)", name, len(found), recreated)
	}
}

// Covered is the slots whose objects the store holds since a list of them:
// the shard once synced; from a shard change, the slots of both shards, and
// the new ones once relisted — never a slot not listed.
func TestCoveredFollowsTheListedShard(t *testing.T) {
	cp, ns, _ := testkit.Parallel(t)
	a, b := shard.SlotsOf(0, 1, 2, 3), shard.SlotsOf(2, 3, 4, 5, 6)
	r := start(t, cp.Config(), ns, a.Set(), watcher.Options[object]{})
	if got := r.w.Covered(); got != a {
		t.Fatalf("synced on slots %v: covers %v", a, got)
	}
	if got, since, at := r.w.Coverage(); got != a || since == "" || sharding.ParseRV(at) < sharding.ParseRV(since) {
		t.Fatalf("synced on slots %v: coverage %v since %q, at %q; want since the list, at or after it", a, got, since, at)
	}
	_, since, _ := r.w.Coverage()
	// A write, so that the relist's resourceVersion is a later one.
	testkit.Create(t, testkit.Client(t, cp.Config()), ns, "later", "x")
	r.w.SetShard(b.Set())
	testkit.Eventually(t, 30*time.Second, func() bool {
		got := r.w.Covered()
		if got != a && got != a.And(b) && got != b { // before the change takes effect, during the relist, after
			t.Fatalf("moving from %v to %v, covers %v", a, b, got)
		}
		return got == b
	}, "after SetShard, covers %v, want %v", r.w.Covered(), b)
	if _, after, _ := r.w.Coverage(); sharding.ParseRV(after) <= sharding.ParseRV(since) {
		t.Errorf("after a shard change, covered since %q; before it, since %q: want the relist's, later", after, since)
	}
	all := start(t, cp.Config(), ns, nil, watcher.Options[object]{})
	if got := all.w.Covered(); got != shard.All() {
		t.Errorf("a watcher of every object covers %v", got)
	}
}
