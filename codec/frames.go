package codec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
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

// ErrBrokenFrame ends a stream whose frame is not JSON: cut short and
// followed by the next frame, or with bytes inside that no JSON value has.
var ErrBrokenFrame = errors.New("malformed watch stream: broken frame")

// A FrameReader splits a WATCH response into its frames, JSON values one
// after another, without decoding them. It is the least a client must do to
// read a stream, and what the benchmarks use as the ceiling; but it must
// notice a frame that is broken, or the frame swallows the ones after it.
//
// kube-apiserver writes each event with a json.Encoder: compact JSON, then a
// newline; a newline inside a string is escaped, so none is ever raw inside
// a frame. A frame cut short and followed by the next one (a middlebox
// mangling the stream, a crashed writer) must end the stream at once, as it
// does client-go's json.Decoder (k8s.io/apimachinery's JSON framer), so that
// the loop re-watches from its last resourceVersion and the server sends the
// lost events again. Following only braces and quotes, a half frame never
// ends: it swallows every frame after it, and the loop hears nothing until
// its watchdog gives up on the silent stream. So the reader checks, at the
// cost of one step per byte outside strings:
//
//   - the JSON grammar outside strings (a key, a colon, a value, a comma or
//     the matching closer, each where it may stand; a number or a literal is
//     only delimited, its letters left to the decoder): a frame cut between
//     tokens ("{" then the next frame's "{") is a syntax error;
//   - no control byte inside a string (JSON forbids them raw): a frame cut
//     inside a string meets the newline that ends its line;
//   - line framing: once a frame with no newline inside was followed by a
//     newline (every kube-apiserver stream, after its first frame), a
//     newline before a frame's end is a cut. It catches the cuts after which
//     the next frame would still parse (after a colon, inside an array), at
//     the cut, where client-go's decoder notices only at the frame after.
//     A stream written otherwise (values split over lines) is never taken
//     for line-framed, and is read by the grammar alone, as client-go does.
//
// A broken frame is ErrBrokenFrame; a stray closer or a bare word where a
// frame should start, ErrBareWord. What the frame holds (a number's digits,
// a string's escapes, the shape of the object) is left to the decoder.
// The checks cost far less than decoding the frame does
// (BenchmarkFrameReader, compare's BenchmarkDelivery).
type FrameReader struct {
	r          io.Reader
	buf        []byte
	start, end int // buf[start:end] is read and not yet returned
	max        int
	err        error
	// stack holds the open containers of the frame being scanned: '{' or '['.
	stack []byte
	// clean: the last frame had no newline inside; lined: the stream is
	// line-framed (a clean frame was followed by a newline).
	clean, lined bool
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
// one; ErrFrameTooLarge that a frame outgrew the bound; ErrBrokenFrame and
// ErrBareWord that the stream is not a sequence of JSON values.
func (f *FrameReader) Next() ([]byte, error) {
	if err := f.between(); err != nil {
		return nil, err
	}
	n, err := f.scan()
	if err != nil {
		return nil, err
	}
	frame := f.buf[f.start : f.start+n]
	f.start += n
	return frame, nil
}

// between skips the whitespace between frames.
func (f *FrameReader) between() error {
	for {
		for f.start < f.end && isSpace(f.buf[f.start]) {
			if f.buf[f.start] == '\n' && f.clean {
				f.lined = true
			}
			f.start++
		}
		if f.start < f.end {
			return nil
		}
		if err := f.fill(); err != nil {
			return err
		}
	}
}

// line is, on a line-framed stream, the next line (trailing spaces cut):
// the next frame, if it is one whole JSON value, which line does not check.
// A caller that checks every byte of it (eventDecoder's onePass, which
// reads a frame as a whole JSON text or declines it) takes it with take,
// and the grammar check Next makes is not made twice; a caller that does
// not take it calls Next, which reads and checks the same bytes as always.
// So line changes what a frame costs, not what the reader returns: a cut
// frame, a broken one, too large a one or an end of stream are still
// Next's to report. ok is false when the stream is not line-framed (yet),
// or the newline is not read yet: line reads no further than Next would,
// which returns a frame once its last byte is here (a server that sent
// the newline only with the next frame would otherwise hold this one back
// until then).
func (f *FrameReader) line() (line []byte, ok bool) {
	if f.between() != nil || !f.lined {
		return nil, false
	}
	i := bytes.IndexByte(f.buf[f.start:f.end], '\n')
	if i < 0 {
		return nil, false
	}
	line = f.buf[f.start : f.start+i]
	for len(line) > 0 && isSpace(line[len(line)-1]) {
		line = line[:len(line)-1]
	}
	return line, len(line) <= f.max
}

// take returns the line that line returned, as Next would have returned
// it: the caller found it one whole JSON value (so Next's checks pass,
// and the frame ends where the line does).
func (f *FrameReader) take(line []byte) {
	f.start += len(line)
	f.clean = true
}

// newlineInside: the error of a line-framed stream's frame cut short.
const newlineInside = "newline inside a frame of a line-framed stream"

// The scanner's states between tokens: what may come next.
const (
	wantValue      = iota // a value (after a colon, a comma in an array)
	wantValueOrEnd        // a value or ']' (after '[')
	wantKeyOrEnd          // a key or '}' (after '{')
	wantKey               // a key (after a comma in an object)
	wantColon             // ':' (after a key)
	wantNext              // ',' or the closer (after a value)
	inWord                // a number, true, false or null
)

// scan finds the end of the value at buf[start:], reading more as needed,
// and returns its length.
func (f *FrameReader) scan() (int, error) {
	switch c := f.buf[f.start]; c {
	case '{', '[', '"':
	default:
		// A watch frame is an object. A bare number, true, false or null
		// (or a stray closer) is a broken stream: re-watch from the last
		// resourceVersion rather than guess where the word ends.
		return 0, fmt.Errorf("%w: %q where a frame should start", ErrBareWord, c)
	}
	f.stack = f.stack[:0]
	f.clean = true
	state, key := wantValue, false // key: the open string is a key
	inString, strStart := false, 0
	i := 0
	broken := func(what string) (int, error) {
		f.clean = false
		return 0, fmt.Errorf("%w: %s at byte %d of the frame", ErrBrokenFrame, what, i)
	}
	for {
		data := f.buf[f.start:f.end]
	scan:
		for i < len(data) {
			if inString {
				// Jump to the next quote; it ends the string unless an odd
				// number of backslashes stands right before it. No control
				// byte may come before it. Eight bytes at a time: the classic
				// "has a zero byte" test (x-0x01…01 borrows into the high bit
				// of a zero byte, &^x keeps the bytes that had it clear; a
				// false match shows only above a true one, so the lowest is
				// exact), for a quote (y, x with quotes zeroed) and for a byte
				// below 0x20.
				q := i
				for ; q+8 <= len(data); q += 8 {
					x := binary.LittleEndian.Uint64(data[q:])
					y := x ^ '"'*ones
					if m := ((y-ones)&^y | (x-0x20*ones)&^x) & highs; m != 0 {
						q += bits.TrailingZeros64(m) / 8
						break
					}
				}
				for q < len(data) && data[q] != '"' && data[q] >= 0x20 {
					q++
				}
				if q < len(data) && data[q] < 0x20 {
					i = q
					return broken(fmt.Sprintf("control byte %q inside a string", data[i]))
				}
				if q == len(data) {
					i = q
					break
				}
				n := 0
				for k := q - 1; k > strStart && data[k] == '\\'; k-- {
					n++
				}
				i = q + 1
				if n%2 == 1 {
					continue
				}
				inString = false
				if key {
					state = wantColon
				} else {
					state = wantNext
				}
				if len(f.stack) == 0 {
					return i, nil
				}
				continue
			}
			c := data[i]
			if state == inWord {
				if isWord(c) {
					i++
					continue
				}
				state = wantNext
			}
			switch c {
			case ' ', '\t', '\r':
				i++
				continue
			case '\n':
				if f.lined {
					return broken(newlineInside)
				}
				f.clean = false
				i++
				continue
			}
			switch state {
			case wantValue, wantValueOrEnd:
				switch {
				case c == '{':
					f.stack = append(f.stack, '{')
					state = wantKeyOrEnd
				case c == '[':
					f.stack = append(f.stack, '[')
					state = wantValueOrEnd
				case c == '"':
					inString, strStart, key = true, i, false
				case c == ']' && state == wantValueOrEnd:
					f.stack = f.stack[:len(f.stack)-1]
					state = wantNext
				case c == '-' || c >= '0' && c <= '9' || c == 't' || c == 'f' || c == 'n':
					state = inWord
				default:
					return broken(fmt.Sprintf("%q where a value should be", c))
				}
			case wantKeyOrEnd, wantKey:
				switch {
				case c == '"':
					inString, strStart, key = true, i, true
				case c == '}' && state == wantKeyOrEnd:
					f.stack = f.stack[:len(f.stack)-1]
					state = wantNext
				default:
					return broken(fmt.Sprintf("%q where a key should be", c))
				}
			case wantColon:
				if c != ':' {
					return broken(fmt.Sprintf("%q where a colon should be", c))
				}
				state = wantValue
			case wantNext:
				top := f.stack[len(f.stack)-1]
				switch {
				case c == ',' && top == '{':
					state = wantKey
				case c == ',':
					state = wantValue
				case c == '}' && top == '{', c == ']' && top == '[':
					f.stack = f.stack[:len(f.stack)-1]
				default:
					return broken(fmt.Sprintf("%q after a value", c))
				}
			}
			i++
			if state == wantNext && len(f.stack) == 0 {
				return i, nil
			}
			continue scan
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

// ones and highs: a one, and the high bit, in each byte of a word.
const ones, highs = 0x0101010101010101, 0x8080808080808080

// isWord: a byte of a number, true, false or null (and of words no value
// has: the decoder refuses those).
func isWord(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'E'
}
