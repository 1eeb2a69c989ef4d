package scorecard

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"rawwatch/api/v1alpha1"
	"rawwatch/client"
	"rawwatch/store"
)

// KindNoBackoff is a client broken on purpose: LIST, then WATCH, and
// whenever a WATCH ends or fails, WATCH again at once (LIST again at once on
// a 410), with no backoff at all. The scorecard must call it stormed; its own
// test holds it to that.
const KindNoBackoff = "nobackoff"

type noBackoff struct {
	c  *client.Client
	ns string

	mu     sync.Mutex
	store  map[string]string
	events *bufio.Writer
	file   *os.File
}

func newNoBackoff(cfg *rest.Config, ns, eventsPath string) (*noBackoff, error) {
	c, err := client.New(cfg)
	if err != nil {
		return nil, err
	}
	f, err := os.Create(eventsPath)
	if err != nil {
		return nil, err
	}
	return &noBackoff{c: c, ns: ns, store: map[string]string{}, file: f, events: bufio.NewWriter(f)}, nil
}

// event records one event in the events file's format ("T RV AT KEY") and
// applies it to the store.
func (n *noBackoff) event(typ byte, o *v1alpha1.MyResource) {
	key := store.KeyOf(o)
	n.mu.Lock()
	defer n.mu.Unlock()
	if typ == 'D' {
		delete(n.store, key)
	} else {
		n.store[key] = o.ResourceVersion
	}
	fmt.Fprintf(n.events, "%c %s %d %s\n", typ, o.ResourceVersion, time.Now().UnixNano(), key)
}

func (n *noBackoff) list(ctx context.Context) (string, error) {
	l, err := n.c.List(ctx, n.ns, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	seen := map[string]bool{}
	for i := range l.Items {
		seen[store.KeyOf(&l.Items[i])] = true
		n.event('A', &l.Items[i])
	}
	n.mu.Lock()
	var gone []string
	for key := range n.store {
		if !seen[key] {
			gone = append(gone, key)
		}
	}
	n.mu.Unlock()
	for _, key := range gone {
		ns, name, _ := strings.Cut(key, "/")
		n.event('D', &v1alpha1.MyResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	}
	return l.ResourceVersion, nil
}

func (n *noBackoff) Run(ctx context.Context, synced chan<- struct{}) {
	rv, needList, first := "", true, true
	for ctx.Err() == nil {
		if needList {
			var err error
			if rv, err = n.list(ctx); err != nil {
				continue // no backoff: that is the bug
			}
			needList = false
			if first {
				close(synced)
				first = false
			}
		}
		w, err := n.c.REST().Get().Namespace(n.ns).Resource(v1alpha1.Resource).
			VersionedParams(&metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}, metav1.ParameterCodec).
			Param("watch", "true").Watch(ctx)
		if err != nil {
			needList = apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				err := apierrors.FromObject(ev.Object)
				needList = apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
				break
			}
			o, ok := ev.Object.(*v1alpha1.MyResource)
			if !ok {
				continue
			}
			rv = o.ResourceVersion
			switch ev.Type {
			case watch.Added:
				n.event('A', o)
			case watch.Modified:
				n.event('U', o)
			case watch.Deleted:
				n.event('D', o)
			}
		}
		w.Stop()
	}
}

func (n *noBackoff) Store() map[string]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string]string, len(n.store))
	for k, v := range n.store {
		out[k] = v
	}
	return out
}

func (n *noBackoff) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.events.Flush(); err != nil {
		return err
	}
	return n.file.Close()
}
