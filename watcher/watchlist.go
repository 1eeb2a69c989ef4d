package watcher

import (
	"context"
	"errors"
	"io"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// errNoInitialEventsEnd: a WatchList stream ended before its initial events did.
var errNoInitialEventsEnd = errors.New("watch-list stream ended before the initial-events-end bookmark")

// watchList gets the initial state from a WATCH with sendInitialEvents=true.
//
//	GET ...RESOURCE?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan
//	    &resourceVersion=RV&allowWatchBookmarks=true&timeoutSeconds=...
//
// The server answers with one ADDED event per object (in no particular
// resourceVersion order), then a BOOKMARK annotated
// k8s.io/initial-events-end: "true" whose resourceVersion is the snapshot's.
// The objects go into a Replacement, exactly as LIST pages do, and are
// swapped into the store at that bookmark; the stream is returned still
// open, to be read on as the Watching step. Memory stays at one object at a
// time plus the objects that changed, where a LIST holds a whole page.
func (w *Watcher[T]) watchList(ctx context.Context, rv string) (Outcome, *stream[T]) {
	yes := true
	s, err := w.open(ctx, metav1.ListOptions{
		ResourceVersion:      rv,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		SendInitialEvents:    &yes,
	})
	if err != nil {
		return Outcome{Op: OpList, Err: err}, nil
	}
	repl := w.store.NewReplacement()
	for {
		ev, err := s.dec.Next()
		var skip *SkipError
		switch {
		case errors.As(err, &skip):
			if skip.Key != "" {
				repl.Keep(skip.Key)
			}
			w.skipped(skip)
			continue
		case errors.Is(err, io.EOF):
			err = errNoInitialEventsEnd
			fallthrough
		case err != nil:
			s.close()
			return Outcome{Op: OpList, Err: err}, nil
		}
		switch ev.Type {
		case Error:
			s.close()
			return Outcome{Op: OpList, Err: ev.Err}, nil
		case Added, Modified:
			repl.Add(ev.Object)
		case Deleted:
			repl.Remove(ev.Object)
		case Bookmark:
			if !ev.InitialEventsEnd {
				continue // a progress bookmark inside the initial events
			}
			w.commit(repl, ev.RV)
			s.start = time.Now() // the live part of the stream starts here
			return Outcome{Op: OpList, RV: ev.RV}, s
		}
	}
}
