package compare

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"rawwatch/client"
	"rawwatch/codec"
	"rawwatch/store"
)

// StormConsumerOptions are what the storm tells its consumer process: one
// process hosts Clients independent consumers of one kind.
type StormConsumerOptions struct {
	Kind       string
	Kubeconfig string
	Namespace  string
	Clients    int
	// Objects is how many objects a synced consumer holds (a relist is
	// complete when it has reported them all again).
	Objects int
	// QPS and Burst are each client's own client-side limits.
	QPS   float32
	Burst int
	// ResultPath receives the StormConsumerResult.
	ResultPath string
}

// StormConsumerResult is what the storm's consumer process reports.
type StormConsumerResult struct {
	Kind    string        `json:"kind"`
	Clients []StormClient `json:"clients"`
	// Requests made by all clients from "arm" (just before the apiserver
	// restart) until every client had relisted.
	Storm StormRequests `json:"storm"`
	// ServerObjects is the size of a fresh LIST taken at the end; every
	// client's cache is compared with it.
	ServerObjects int `json:"serverObjects"`
}

// StormClient is one client's figures. Times are unix nanoseconds.
type StormClient struct {
	SyncedAt   int64 `json:"syncedAt"`
	RelistedAt int64 `json:"relistedAt"`
	StoreLen   int   `json:"storeLen"`
	// Missing keys, Stale resourceVersions and Extra keys against the
	// server's LIST at the end.
	Missing int `json:"missing"`
	Stale   int `json:"stale"`
	Extra   int `json:"extra"`
}

// StormRequests are request counts summed over the clients.
type StormRequests struct {
	// Lists: LIST requests beginning a list; ListPages: every LIST request;
	// WatchLists: WATCHes with sendInitialEvents; Watches: every WATCH;
	// Probes: one-item LISTs (the raw watcher's "where is the server").
	RequestCounts
	// All requests sent (any verb, retries included), responses 429, and
	// requests that got no response (the apiserver was away).
	Total     int64 `json:"total"`
	Throttled int64 `json:"throttled"`
	Failed    int64 `json:"failed"`
	// Bytes of response bodies read (decompressed), and read from the
	// connections (ByteCounter).
	Read int64 `json:"bytesRead"`
	Wire int64 `json:"wireBytes"`
}

func (a StormRequests) minus(b StormRequests) StormRequests {
	return StormRequests{
		RequestCounts: RequestCounts{ListStarts: a.ListStarts - b.ListStarts, ListPages: a.ListPages - b.ListPages,
			WatchLists: a.WatchLists - b.WatchLists, Watches: a.Watches - b.Watches, Probes: a.Probes - b.Probes},
		Total: a.Total - b.Total, Throttled: a.Throttled - b.Throttled, Failed: a.Failed - b.Failed,
		Read: a.Read - b.Read, Wire: a.Wire - b.Wire,
	}
}

type stormClient struct {
	c    consumer
	rec  *recorder
	wire *ByteCounter

	mu         sync.Mutex
	syncedAt   int64
	relistedAt int64
}

func (s *stormClient) now() status {
	return status{adds: s.rec.count(EvAdd), updates: s.rec.count(EvUpdate), resyncs: s.rec.count(EvResync), doneLists: s.c.lists()}
}

func (s *stormClient) requests() StormRequests {
	return StormRequests{RequestCounts: s.rec.counts.snapshot(), Total: s.wire.Requests(), Throttled: s.wire.Throttled(), Failed: s.wire.Failed(),
		Read: s.wire.Read(), Wire: s.wire.Wire()}
}

// The protocol between the storm and its consumer process, one line each:
//
//	consumer → storm (stdout):  synced I UNIXNS     client I finished its initial sync
//	                            armed               the relist watch is armed
//	                            relisted I UNIXNS   client I finished a relist since "arm"
//	                            allrelisted         every client has
//	storm → consumer (stdin):   arm                 note where every client stands
//	                            stop                compare every cache with the server, write the result, exit

// RunStormConsumer is the main of the storm's consumer process.
func RunStormConsumer(opts StormConsumerOptions, stdin io.Reader, stdout io.Writer) error {
	if opts.Clients <= 0 || opts.Objects <= 0 {
		return fmt.Errorf("storm consumer: clients %d, objects %d: both must be positive", opts.Clients, opts.Objects)
	}
	base, err := clientcmd.BuildConfigFromFlags("", opts.Kubeconfig)
	if err != nil {
		return err
	}
	base.QPS, base.Burst = opts.QPS, opts.Burst
	say := lines(stdout)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clients := make([]*stormClient, opts.Clients)
	var wg sync.WaitGroup
	for i := range clients {
		cfg := rest.CopyConfig(base)
		// Its own transport and connections: client-go shares one transport
		// among clients with the same TLS settings, but not among clients
		// whose config has a Dial function, as Install sets.
		s := &stormClient{rec: discardRecorder(), wire: &ByteCounter{}}
		s.wire.Install(cfg)
		s.rec.countRequests(cfg)
		if s.c, err = newConsumer(opts.Kind, cfg, opts.Namespace, s.rec, 0, nil, codec.WireJSON); err != nil {
			return err
		}
		clients[i] = s
		synced := make(chan struct{})
		wg.Go(func() { s.c.run(ctx, synced) })
		go func() {
			select {
			case <-synced:
				at := time.Now().UnixNano()
				s.mu.Lock()
				s.syncedAt = at
				s.mu.Unlock()
				say("synced %d %d", i, at)
			case <-ctx.Done():
			}
		}()
	}

	result := StormConsumerResult{Kind: opts.Kind}
	var armed []StormRequests
	var relistDone sync.WaitGroup
	in := bufio.NewScanner(stdin)
	for in.Scan() {
		cmd, _, _ := strings.Cut(in.Text(), " ")
		if cmd == "stop" {
			break
		}
		if cmd != "arm" || armed != nil {
			continue
		}
		armed = make([]StormRequests, len(clients))
		for i, s := range clients {
			armed[i] = s.requests()
			before := s.now()
			relistDone.Add(1)
			go func() {
				defer relistDone.Done()
				for ctx.Err() == nil {
					if relisted(opts.Kind, before, s.now(), opts.Objects) {
						at := time.Now().UnixNano()
						s.mu.Lock()
						s.relistedAt = at
						s.mu.Unlock()
						say("relisted %d %d", i, at)
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
			}()
		}
		go func() {
			relistDone.Wait()
			if ctx.Err() != nil {
				return
			}
			var sum StormRequests
			for i, s := range clients {
				sum = addRequests(sum, s.requests().minus(armed[i]))
			}
			result.Storm = sum
			say("allrelisted")
		}()
		say("armed")
	}

	// Every cache against a fresh LIST of the server (nothing writes to the
	// namespace during a storm: every resourceVersion must match).
	server, err := listAll(ctx, base, opts.Namespace)
	if err != nil {
		return err
	}
	result.ServerObjects = len(server)
	for _, s := range clients {
		dump := s.c.dump()
		s.mu.Lock()
		sc := StormClient{SyncedAt: s.syncedAt, RelistedAt: s.relistedAt, StoreLen: s.c.storeLen()}
		s.mu.Unlock()
		for k, rv := range server {
			got, ok := dump[k]
			switch {
			case !ok:
				sc.Missing++
			case got != rv:
				sc.Stale++
			}
		}
		for k := range dump {
			if _, ok := server[k]; !ok {
				sc.Extra++
			}
		}
		result.Clients = append(result.Clients, sc)
	}
	cancel()
	stopped := make(chan struct{})
	go func() { wg.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
	}
	b, err := json.Marshal(result)
	if err != nil {
		return err
	}
	return os.WriteFile(opts.ResultPath, b, 0o644)
}

func addRequests(a, b StormRequests) StormRequests {
	return StormRequests{
		RequestCounts: RequestCounts{ListStarts: a.ListStarts + b.ListStarts, ListPages: a.ListPages + b.ListPages,
			WatchLists: a.WatchLists + b.WatchLists, Watches: a.Watches + b.Watches, Probes: a.Probes + b.Probes},
		Total: a.Total + b.Total, Throttled: a.Throttled + b.Throttled, Failed: a.Failed + b.Failed,
		Read: a.Read + b.Read, Wire: a.Wire + b.Wire,
	}
}

// listAll is key → resourceVersion of every MyResource in ns, by paginated LIST.
func listAll(ctx context.Context, cfg *rest.Config, ns string) (map[string]string, error) {
	c, err := client.New(cfg)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	opts := metav1.ListOptions{Limit: 500}
	for {
		l, err := c.List(ctx, ns, opts)
		if err != nil {
			return nil, err
		}
		for i := range l.Items {
			out[store.KeyOf(&l.Items[i])] = l.Items[i].ResourceVersion
		}
		if l.Continue == "" {
			return out, nil
		}
		opts = metav1.ListOptions{Limit: 500, Continue: l.Continue}
	}
}
