// Package wire reads the captures in the repository's testdata/wire: what
// kube-apiserver sent, byte for byte, to LIST and WATCH requests for
// MyResources, recorded by hack/record (go generate ./hack/record) from the
// local control plane. The decoder tests and fuzz seeds of package watcher
// read them, and Replay serves them as a watcher.Source, so that a fake
// server or a test can play back a real server's answers.
//
// The recording: the three sample MyResources of testdata/samples
// (default/broken, default/greeting, default/hello) are applied, then
//
//   - ListPage1, ListPage2: LIST ?limit=2, then the page at its continue token;
//   - WatchList: WATCH ?sendInitialEvents=true&resourceVersionMatch=NotOlderThan
//     &allowWatchBookmarks=true&timeoutSeconds=10 (a WatchList): ADDED for each
//     of the three, the BOOKMARK annotated k8s.io/initial-events-end, then
//     MODIFIED hello, ADDED extra, DELETED broken (written while the stream
//     was open), with BOOKMARKs where the server's watch cache put them (at
//     least the one two seconds before the timeout, the last frame), and the
//     end of the stream;
//   - WatchGone: WATCH ?resourceVersion=1: one ERROR event, 410 Expired.
//
// Server names the kube-apiserver version and the requests.
//
// The fault-*.json files are exchanges (Exchange, exchange.go): what
// kube-apiserver answered in the situations the faults of package
// faultproxy stand for (a compaction under a WATCH, a resourceVersion from
// the future, a restart, a WatchList to a server without the feature, an
// overloaded priority level), status, headers, body and silence, each
// naming its situation and server; faultproxy's tests hold its faults to
// them (Same).
package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The captures' file names in Dir.
const (
	ListPage1 = "list-page1.json"
	ListPage2 = "list-page2.json"
	WatchList = "watchlist.jsonl"
	WatchGone = "watch-gone.jsonl"
	Server    = "server.txt"
)

// InitialEventsEnd is the annotation of the bookmark that ends a WatchList's
// initial events.
const InitialEventsEnd = "k8s.io/initial-events-end"

// Dir is testdata/wire at the module root, found from the working directory
// upwards (a test runs in its package's directory).
func Dir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "testdata", "wire"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("wire: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Read returns the capture named name.
func Read(name string) ([]byte, error) {
	dir, err := Dir()
	if err != nil {
		return nil, err
	}
	return os.ReadFile(filepath.Join(dir, name))
}

// MustRead is Read for a test: a capture it cannot read fails tb.
func MustRead(tb testing.TB, name string) []byte {
	tb.Helper()
	data, err := Read(name)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// Frames splits a WATCH stream into its frames, each with its newline, as
// the server wrote them (kube-apiserver ends every frame with one).
func Frames(stream []byte) [][]byte {
	var frames [][]byte
	for len(stream) > 0 {
		i := bytes.IndexByte(stream, '\n')
		if i < 0 {
			i = len(stream) - 1
		}
		frames = append(frames, stream[:i+1])
		stream = stream[i+1:]
	}
	return frames
}

// frame is what Replay reads of a WATCH frame.
type frame struct {
	Type   string `json:"type"`
	Object struct {
		Metadata struct {
			ResourceVersion string            `json:"resourceVersion"`
			Annotations     map[string]string `json:"annotations"`
		} `json:"metadata"`
	} `json:"object"`
}

// Replay answers LISTs and WATCHes with the captures, as the server answered
// the recorder, so that it is a watcher.Source:
//
//   - LIST: ListPage1, and ListPage2 at ListPage1's continue token (any
//     other token: 410 Expired, as for a token of a compacted snapshot);
//   - WATCH with sendInitialEvents: the WatchList stream;
//   - WATCH from the lists' resourceVersion, or from a later one up to the
//     WatchList's initial-events-end bookmark (no MyResource was written in
//     between; other writes move etcd's revision on): the WatchList
//     stream's frames after that bookmark;
//   - WATCH from an older resourceVersion: WatchGone;
//   - WATCH from a newer one: a stream that sends nothing until ctx ends (the
//     recording has no more).
type Replay struct {
	page1, page2, watchList, gone []byte
	token                         string
	listRV, endRV                 int64
	live                          []byte // the WatchList frames after its initial events
}

// NewReplay reads the captures.
func NewReplay() (*Replay, error) {
	r := &Replay{}
	for name, into := range map[string]*[]byte{ListPage1: &r.page1, ListPage2: &r.page2, WatchList: &r.watchList, WatchGone: &r.gone} {
		data, err := Read(name)
		if err != nil {
			return nil, err
		}
		*into = data
	}
	var list metav1.List
	err := json.Unmarshal(r.page1, &list)
	if err != nil {
		return nil, fmt.Errorf("wire: %s: %w", ListPage1, err)
	}
	r.token = list.Continue
	if r.listRV, err = strconv.ParseInt(list.ResourceVersion, 10, 64); err != nil {
		return nil, fmt.Errorf("wire: %s: resourceVersion: %w", ListPage1, err)
	}
	frames := Frames(r.watchList)
	for i, f := range frames {
		var fr frame
		if err := json.Unmarshal(f, &fr); err != nil {
			return nil, fmt.Errorf("wire: %s frame %d: %w", WatchList, i, err)
		}
		if fr.Type == "BOOKMARK" && fr.Object.Metadata.Annotations[InitialEventsEnd] == "true" {
			rv, err := strconv.ParseInt(fr.Object.Metadata.ResourceVersion, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("wire: %s: initial-events-end bookmark: %w", WatchList, err)
			}
			r.endRV, r.live = rv, bytes.Join(frames[i+1:], nil)
			return r, nil
		}
	}
	return nil, fmt.Errorf("wire: %s has no initial-events-end bookmark", WatchList)
}

// List answers with a LIST page.
func (r *Replay) List(_ context.Context, opts metav1.ListOptions) (io.ReadCloser, error) {
	switch opts.Continue {
	case "":
		return body(r.page1), nil
	case r.token:
		return body(r.page2), nil
	}
	return nil, apierrors.NewResourceExpired("The provided continue parameter is too old to display a consistent list result.")
}

// Watch answers with a WATCH stream.
func (r *Replay) Watch(ctx context.Context, opts metav1.ListOptions) (io.ReadCloser, error) {
	if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		return body(r.watchList), nil
	}
	rv, err := strconv.ParseInt(opts.ResourceVersion, 10, 64)
	switch {
	case err != nil:
		return nil, apierrors.NewBadRequest("replay: a WATCH needs a resourceVersion: " + opts.ResourceVersion)
	case rv < r.listRV:
		return body(r.gone), nil
	case rv <= r.endRV:
		return body(r.live), nil
	}
	pr, pw := io.Pipe()
	stop := context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })
	return quiet{pr, stop}, nil
}

func body(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }

// quiet is a stream that sends nothing until its context ends or it is closed.
type quiet struct {
	*io.PipeReader
	stop func() bool
}

func (q quiet) Close() error {
	q.stop()
	return q.PipeReader.Close()
}
