package sharding_test

import (
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"rawwatch/api/v1alpha1"
	"rawwatch/internal/testkit"
	"rawwatch/shard"
	"rawwatch/sharding"
	"rawwatch/store"
	"rawwatch/watcher"
)

func TestMain(m *testing.M) { testkit.Main(m) }

type object = *v1alpha1.MyResource

var codec = watcher.JSONCodec[object]{GVK: v1alpha1.GroupVersionKind}

// recorder keeps the deltas a watcher handed out.
type recorder = testkit.Deltas[object]

type running struct {
	w     *sharding.Watcher[object]
	store *store.Store[object]
	rec   *recorder
}

// start runs a watcher of set on one namespace through cfg until the test
// ends, and waits for its first list.
func start(t *testing.T, cfg *rest.Config, ns string, set shard.Set, opts watcher.Options[object]) *running {
	t.Helper()
	return startLogging(t, cfg, ns, set, opts, klog.Background())
}

// startLogging is start with the watcher's log going to logger.
func startLogging(t *testing.T, cfg *rest.Config, ns string, set shard.Set, opts watcher.Options[object], logger klog.Logger) *running {
	t.Helper()
	c := testkit.Client(t, cfg)
	r := &running{store: store.New[object](), rec: &recorder{}}
	opts.Handler = r.rec.Handle
	opts.Codec = codec
	opts.Backoff = watcher.Backoff{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond, Factor: 2, Jitter: 0.5, ResetAfter: 2 * time.Minute}
	r.w = sharding.NewWatcher(watcher.RESTSource{Client: c.REST(), Resource: v1alpha1.Resource, Namespace: ns}, r.store, opts, set)
	testkit.RunSynced(t, r.w, logger)
	return r
}
