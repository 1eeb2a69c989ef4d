package wire

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Exchange is one request and kube-apiserver's answer to it, as recorded in
// a situation that a fault of package faultproxy stands for (a compaction, a
// resourceVersion from the future, a restart, an overload): the status, the
// headers a client can act on, the body byte for byte, how long the answer
// took to begin and how it ended. A fault proxy's answer, recorded the same
// way (Capture), is compared with it (Same).
type Exchange struct {
	// Situation says what the server was in, Server which server it was
	// (version, watch cache on or off, flags).
	Situation string `json:"situation"`
	Server    string `json:"server"`
	// Request is "GET PATH?QUERY".
	Request string `json:"request"`
	// Status is the HTTP status; 0 if no answer came (Err says why).
	Status int `json:"status,omitempty"`
	// Header holds the headers but Date, Audit-Id, Content-Length and
	// Vary, one value each; X-Kubernetes-Pf-* hold a UID, recorded as "UID".
	Header map[string]string `json:"header,omitempty"`
	// Body is what the server sent, up to the end of the stream or of the
	// window the recorder waited.
	Body string `json:"body,omitempty"`
	// Waited is how long the headers took, rounded to a tenth of a second.
	Waited Duration `json:"waited"`
	// End is how the body ended: "eof" (the server ended it), "silent" (it
	// was open and sent nothing more for Window), "error: ..." (the
	// connection broke).
	End string `json:"end,omitempty"`
	// Window is how long the recorder waited for the next byte of an open
	// stream before it hung up.
	Window Duration `json:"window,omitempty"`
	// Err is the transport's error when no answer came.
	Err string `json:"err,omitempty"`
}

// Duration is a time.Duration written as "3.0s".
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).Round(100 * time.Millisecond).String())
}

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = Duration(v)
	return err
}

// volatile headers differ on every answer, or with the encoding the
// client asked for; they are not recorded.
var volatile = []string{"Date", "Audit-Id", "Content-Length", "Vary"}

// Capture sends req with c and records the answer: the headers once they
// come, then the body until the server ends it, or until nothing more came
// for window (a stream left open: End "silent"), or until ctx ends. The
// request's context must outlive it; Capture cancels nothing itself but
// closes the body.
func Capture(ctx context.Context, c *http.Client, req *http.Request, window time.Duration) Exchange {
	ex := Exchange{Request: req.Method + " " + req.URL.RequestURI(), Window: Duration(window)}
	start := time.Now()
	resp, err := c.Do(req.WithContext(ctx))
	ex.Waited = Duration(time.Since(start).Round(100 * time.Millisecond))
	if err != nil {
		ex.Err = addresses.ReplaceAllString(err.Error(), "127.0.0.1:PORT")
		return ex
	}
	defer resp.Body.Close()
	ex.Status = resp.StatusCode
	ex.Header = map[string]string{}
	for k, v := range resp.Header {
		if slices.Contains(volatile, k) || len(v) == 0 {
			continue
		}
		if strings.HasPrefix(k, "X-Kubernetes-Pf-") {
			v = []string{"UID"}
		}
		ex.Header[k] = v[0]
	}
	// Read on another goroutine, so that silence can be timed: each chunk
	// the server flushes arrives as one read.
	type chunk struct {
		b   []byte
		err error
	}
	chunks := make(chan chunk)
	done := make(chan struct{})
	defer close(done)
	go func() {
		r := bufio.NewReader(resp.Body)
		for {
			buf := make([]byte, 32<<10)
			n, err := r.Read(buf)
			select {
			case chunks <- chunk{buf[:n], err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	var body strings.Builder
	timer := time.NewTimer(window)
	defer timer.Stop()
	for {
		select {
		case ch := <-chunks:
			body.Write(ch.b)
			switch {
			case errors.Is(ch.err, io.EOF):
				ex.Body, ex.End = body.String(), "eof"
				return ex
			case ch.err != nil:
				ex.Body, ex.End = body.String(), "error: "+addresses.ReplaceAllString(ch.err.Error(), "127.0.0.1:PORT")
				return ex
			}
			timer.Reset(window)
		case <-timer.C:
			ex.Body, ex.End = body.String(), "silent"
			return ex
		case <-ctx.Done():
			ex.Body, ex.End = body.String(), "error: "+ctx.Err().Error()
			return ex
		}
	}
}

// addresses are loopback ports, which differ on every run.
var addresses = regexp.MustCompile(`127\.0\.0\.1:[0-9]+`)

// digits are masked by Same: resourceVersions, times and UIDs differ on
// every recording.
var digits = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9]+`)

// Mask replaces every number and UID in s with N: what stays is the shape.
func Mask(s string) string { return digits.ReplaceAllString(s, "N") }

// Same says how got (a fault proxy's answer) differs from want (the
// server's, recorded): the status, every recorded header, the body with its
// numbers masked, and how it ended must be the same, and the wait as long
// within a second (nil: no difference). The request is not compared: the
// proxy answers requests a client makes, at its own resourceVersions.
func Same(want, got Exchange) error {
	var diffs []string
	if got.Status != want.Status {
		diffs = append(diffs, fmt.Sprintf("status %d, want %d", got.Status, want.Status))
	}
	for k, v := range want.Header {
		if got.Header[k] != v {
			diffs = append(diffs, fmt.Sprintf("header %s: %q, want %q", k, got.Header[k], v))
		}
	}
	for k, v := range got.Header {
		if _, ok := want.Header[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("header %s: %q, not in the recording", k, v))
		}
	}
	if Mask(got.Body) != Mask(want.Body) {
		diffs = append(diffs, fmt.Sprintf("body (numbers masked)\n  got  %q\n  want %q", Mask(got.Body), Mask(want.Body)))
	}
	if got.End != want.End {
		diffs = append(diffs, fmt.Sprintf("end %q, want %q", got.End, want.End))
	}
	if d := time.Duration(got.Waited - want.Waited); d > time.Second || d < -time.Second {
		diffs = append(diffs, fmt.Sprintf("headers after %v, want %v", time.Duration(got.Waited), time.Duration(want.Waited)))
	}
	if len(diffs) == 0 {
		return nil
	}
	return errors.New(strings.Join(diffs, "; "))
}

// ReadExchange reads the recorded exchange named name (a file of Dir).
func ReadExchange(name string) (Exchange, error) {
	var ex Exchange
	b, err := Read(name)
	if err != nil {
		return ex, err
	}
	if err := json.Unmarshal(b, &ex); err != nil {
		return ex, fmt.Errorf("wire: %s: %w", name, err)
	}
	return ex, nil
}

// WriteExchange writes ex into dir as name, indented, one field a line.
func WriteExchange(dir, name string, ex Exchange) error {
	b, err := json.MarshalIndent(ex, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644)
}
