package watcher

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// DefaultMaxFrame bounds one watch frame: kube-apiserver refuses objects
// over about 1.5 MiB (etcd's request limit), so a frame many times that is
// a broken or hostile stream, not an object.
const DefaultMaxFrame = 16 << 20

// ErrBareWord ends a stream with something other than an object, array or
// string where a frame should start.
var ErrBareWord = errors.New("malformed watch stream: not a JSON object")

// ErrFrameTooLarge ends a stream whose frame outgrew the bound.
var ErrFrameTooLarge = errors.New("watch frame larger than the limit")

// A FrameReader splits a WATCH response — JSON values one after another,
// newline-separated by kube-apiserver though nothing relies on it — into its
// frames, without decoding them: it only follows strings (and their
// escapes) and the nesting of braces and brackets to find where each value
// ends. It is the least a client must do to read a stream, and what the
// benchmarks use as the ceiling.
type FrameReader struct {
	r          io.Reader
	buf        []byte
	start, end int // buf[start:end] is read and not yet returned
	max        int
	err        error
}

// NewFrameReader reads frames of at most max bytes (DefaultMaxFrame if 0).
func NewFrameReader(r io.Reader, max int) *FrameReader {
	if max <= 0 {
		max = DefaultMaxFrame
	}
	return &FrameReader{r: r, buf: make([]byte, 0, 32<<10), max: max}
}

// Next returns the next frame, valid until the following call. io.EOF means
// the stream ended between frames; io.ErrUnexpectedEOF that it ended inside
// one; ErrFrameTooLarge that a frame outgrew the bound.
func (f *FrameReader) Next() ([]byte, error) {
	// Skip the whitespace between frames.
	for {
		for f.start < f.end && isSpace(f.buf[f.start]) {
			f.start++
		}
		if f.start < f.end {
			break
		}
		if err := f.fill(); err != nil {
			return nil, err
		}
	}
	n, err := f.scan()
	if err != nil {
		return nil, err
	}
	frame := f.buf[f.start : f.start+n]
	f.start += n
	return frame, nil
}

// scan finds the end of the value at buf[start:], reading more as needed,
// and returns its length.
func (f *FrameReader) scan() (int, error) {
	depth, inString, strStart := 0, false, 0
	i := 0
	switch c := f.buf[f.start]; c {
	case '{', '[', '"':
	default:
		// A watch frame is an object. A bare number, true, false or null
		// (or a stray closer) is a broken stream: re-watch from the last
		// resourceVersion rather than guess where the word ends.
		return 0, fmt.Errorf("%w: %q where a frame should start", ErrBareWord, c)
	}
	scalar := f.buf[f.start] == '"'
	for {
		data := f.buf[f.start:f.end]
		for i < len(data) {
			if inString {
				// Jump to the next quote; it ends the string unless an odd
				// number of backslashes stands right before it.
				j := bytes.IndexByte(data[i:], '"')
				if j < 0 {
					i = len(data)
					break
				}
				q := i + j
				n := 0
				for k := q - 1; k > strStart && data[k] == '\\'; k-- {
					n++
				}
				i = q + 1
				if n%2 == 1 {
					continue
				}
				inString = false
				if scalar && depth == 0 {
					return i, nil
				}
				continue
			}
			c := data[i]
			switch {
			case c == '"':
				inString, strStart = true, i
			case c == '{' || c == '[':
				depth++
			case c == '}' || c == ']':
				depth--
				if depth == 0 {
					return i + 1, nil
				}
			}
			i++
		}
		if i >= f.max {
			return 0, fmt.Errorf("%w (%d bytes)", ErrFrameTooLarge, f.max)
		}
		if err := f.fill(); err != nil {
			if errors.Is(err, io.EOF) {
				return 0, io.ErrUnexpectedEOF
			}
			return 0, err
		}
	}
}

// fill reads more into buf, moving the unread part to the front first.
func (f *FrameReader) fill() error {
	if f.err != nil {
		return f.err
	}
	if f.start > 0 {
		n := copy(f.buf[:cap(f.buf)], f.buf[f.start:f.end])
		f.start, f.end = 0, n
		f.buf = f.buf[:n]
	}
	if f.end == cap(f.buf) {
		grown := make([]byte, f.end, 2*cap(f.buf))
		copy(grown, f.buf[:f.end])
		f.buf = grown
	}
	n, err := f.r.Read(f.buf[f.end:cap(f.buf)])
	f.end += n
	f.buf = f.buf[:f.end]
	if err != nil {
		f.err = err // returned by the next fill, once this data is used
		if n == 0 {
			return err
		}
	}
	return nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' }
