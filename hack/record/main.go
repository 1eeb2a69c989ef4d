// Command record captures what kube-apiserver sends for MyResources, byte for
// byte, into testdata/wire (package wire describes each capture):
// it starts the local control plane (package controlplane; bin/ needs etcd
// and kube-apiserver, make tools), applies testdata/samples/myresources.yaml,
// and makes the requests with a plain HTTP client that asks for no
// compression, so that a file holds the response body as the server wrote it.
//
//	go generate ./hack/record
//
// It fails, writing nothing, if an answer is not what the tests rely on (two
// LIST pages, the WatchList's frames in their order, the 410). Only bodies are
// written, and the server's version: no token, key or address.
//
// It also records the fault exchanges (faults.go): what kube-apiserver, with
// its watch cache and without, answers in each situation a fault of package
// faultproxy stands for. -only wire or -only faults records one set.
package main

//go:generate go run . -out ../../testdata/wire

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"rawwatch/internal/controlplane"
	"rawwatch/wire"
)

const resource = "/apis/example.com/v1alpha1/myresources"

func main() {
	out := flag.String("out", "testdata/wire", "directory to write the captures to")
	only := flag.String("only", "", `record only "wire" (the LIST pages and WATCH streams) or "faults" (the fault exchanges); default both`)
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := run(ctx, *out, *only); err != nil {
		fmt.Fprintln(os.Stderr, "record:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out, only string) error {
	logf := func(f string, a ...any) { fmt.Fprintf(os.Stderr, "record: "+f+"\n", a...) }
	cp, err := controlplane.Start(ctx, controlplane.Options{Logf: logf})
	if err != nil {
		return err
	}
	defer cp.Stop()
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	cfg := cp.Config()
	cfg.DisableCompression = true
	httpc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	r := &recorder{ctx: ctx, http: httpc, base: cfg.Host, files: map[string][]byte{}, exchanges: map[string][]byte{}, logf: logf}
	if err := controlplane.Apply(ctx, cfg, filepath.Join(root, "testdata", "samples", "myresources.yaml")); err != nil {
		return err
	}
	version, err := r.get("/version")
	if err != nil {
		return err
	}
	var v struct{ GitVersion, GoVersion, Platform string }
	if err := json.Unmarshal(version, &v); err != nil {
		return err
	}
	r.version = "kube-apiserver " + v.GitVersion
	if only != "faults" {
		if err := r.lists(); err != nil {
			return err
		}
		if err := r.watchList(); err != nil {
			return err
		}
		if err := r.gone(); err != nil {
			return err
		}
		r.files[wire.Server] = fmt.Appendf(nil, "kube-apiserver %s (%s, %s), etcd from hack/tools/go.mod; recorded by go generate ./hack/record\n\n%s",
			v.GitVersion, v.GoVersion, v.Platform, strings.Join(r.requests, ""))
	}
	if only != "wire" {
		if err := r.faults(cp); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, files := range []map[string][]byte{r.files, r.exchanges} {
		for name, data := range files {
			if err := os.WriteFile(filepath.Join(out, name), data, 0o644); err != nil {
				return err
			}
		}
	}
	logf("wrote %d files to %s", len(r.files)+len(r.exchanges), out)
	return nil
}

type recorder struct {
	ctx      context.Context
	http     *http.Client
	base     string
	files    map[string][]byte
	requests []string // "file: GET path?query" lines for wire.Server
	// exchanges are the fault recordings (faults.go), by file name.
	exchanges map[string][]byte
	version   string // "kube-apiserver v1.37.2"
	logf      func(string, ...any)
}

// open makes a GET and returns the response of a 200.
func (r *recorder) open(path string, q url.Values, file string) (*http.Response, error) {
	u := path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(r.ctx, http.MethodGet, r.base+u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := r.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s: %s", u, resp.Status, b)
	}
	if file != "" {
		r.requests = append(r.requests, fmt.Sprintf("%s: GET %s\n", file, u))
	}
	return resp, nil
}

func (r *recorder) get(path string) ([]byte, error) {
	resp, err := r.open(path, nil, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

func (r *recorder) capture(file string, q url.Values) ([]byte, error) {
	resp, err := r.open(resource, q, file)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	r.files[file] = b
	return b, err
}

// lists: LIST ?limit=2, then the page at its continue token.
func (r *recorder) lists() error {
	p1, err := r.capture(wire.ListPage1, url.Values{"limit": {"2"}})
	if err != nil {
		return err
	}
	var list struct {
		Metadata struct{ Continue string }
		Items    []json.RawMessage
	}
	if err := json.Unmarshal(p1, &list); err != nil || list.Metadata.Continue == "" || len(list.Items) != 2 {
		return fmt.Errorf("first page: %d items, continue %q (%v); want 2 and a token", len(list.Items), list.Metadata.Continue, err)
	}
	p2, err := r.capture(wire.ListPage2, url.Values{"limit": {"2"}, "continue": {list.Metadata.Continue}})
	if err != nil {
		return err
	}
	list.Metadata.Continue, list.Items = "", nil
	if err := json.Unmarshal(p2, &list); err != nil || list.Metadata.Continue != "" || len(list.Items) != 1 {
		return fmt.Errorf("second page: %d items, continue %q (%v); want the last one", len(list.Items), list.Metadata.Continue, err)
	}
	return nil
}

// watchList: a WatchList, with three writes once its initial events are in,
// read to the end (timeoutSeconds=10; the server bookmarks 2 s before).
func (r *recorder) watchList() error {
	resp, err := r.open(resource, url.Values{"watch": {"true"}, "sendInitialEvents": {"true"},
		"resourceVersionMatch": {"NotOlderThan"}, "allowWatchBookmarks": {"true"}, "timeoutSeconds": {"10"}}, wire.WatchList)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var stream bytes.Buffer
	var types []string
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadBytes('\n')
		stream.Write(line)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		var f struct {
			Type   string
			Object struct {
				Metadata struct{ Annotations map[string]string }
			}
		}
		if err := json.Unmarshal(line, &f); err != nil {
			return fmt.Errorf("watch-list frame %q: %w", line, err)
		}
		if f.Object.Metadata.Annotations[wire.InitialEventsEnd] == "true" {
			f.Type += "(end)"
			if err := r.writes(); err != nil {
				return err
			}
		}
		types = append(types, f.Type)
	}
	r.files[wire.WatchList] = stream.Bytes()
	// Bookmarks come when the server's watch cache schedules them (one 2 s
	// before the timeout; others on its own cadence): any number between
	// the events, at least the last.
	events := slices.DeleteFunc(slices.Clone(types), func(t string) bool { return t == "BOOKMARK" })
	want := []string{"ADDED", "ADDED", "ADDED", "BOOKMARK(end)", "MODIFIED", "ADDED", "DELETED"}
	if !slices.Equal(events, want) || types[len(types)-1] != "BOOKMARK" {
		return fmt.Errorf("watch-list frames %v; want %v with bookmarks between and at the end", types, want)
	}
	return nil
}

// writes: a change of each kind: a merge patch, a create, a delete.
func (r *recorder) writes() error {
	for _, w := range []struct{ method, path, body string }{
		{http.MethodPatch, "/namespaces/default/myresources/hello", `{"spec":{"message":"hello again"}}`},
		{http.MethodPost, "/namespaces/default/myresources", `{"apiVersion":"example.com/v1alpha1","kind":"MyResource","metadata":{"name":"extra","namespace":"default"},"spec":{"message":"created while watched"}}`},
		{http.MethodDelete, "/namespaces/default/myresources/broken", ``},
	} {
		req, err := http.NewRequestWithContext(r.ctx, w.method, r.base+"/apis/example.com/v1alpha1"+w.path, strings.NewReader(w.body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		if w.method == http.MethodPatch {
			req.Header.Set("Content-Type", "application/merge-patch+json")
		}
		resp, err := r.http.Do(req)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			return fmt.Errorf("%s %s: %s: %s", w.method, w.path, resp.Status, b)
		}
	}
	return nil
}

// gone: a WATCH from resourceVersion 1, long compacted out of the watch
// cache's window: one ERROR event, 410 Expired.
func (r *recorder) gone() error {
	b, err := r.capture(wire.WatchGone, url.Values{"watch": {"true"}, "resourceVersion": {"1"},
		"allowWatchBookmarks": {"true"}, "timeoutSeconds": {"10"}})
	if err != nil {
		return err
	}
	var f struct {
		Type   string
		Object struct{ Code int }
	}
	if frames := wire.Frames(b); len(frames) != 1 || json.Unmarshal(frames[0], &f) != nil || f.Type != "ERROR" || f.Object.Code != http.StatusGone {
		return fmt.Errorf("watch from resourceVersion 1: %q; want one ERROR event, 410", b)
	}
	return nil
}
