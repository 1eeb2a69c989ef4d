package app

import (
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// h2frame is one HTTP/2 frame: a 9-byte header and the payload.
func h2frame(typ, flags byte, stream uint32, payload []byte) []byte {
	f := make([]byte, 9, 9+len(payload))
	f[0], f[1], f[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	f[3], f[4] = typ, flags
	binary.BigEndian.PutUint32(f[5:], stream)
	return append(f, payload...)
}

// hpackLiteral is a header field as an HPACK literal without indexing, with
// a literal name.
func hpackLiteral(name, value string) []byte {
	str := func(b []byte, s string) []byte {
		if n := len(s); n < 127 {
			b = append(b, byte(n))
		} else {
			b = append(b, 127)
			for n -= 127; n >= 128; n >>= 7 {
				b = append(b, byte(n%128+128))
			}
			b = append(b, byte(n)) // the last 7 bits
		}
		return append(b, s...)
	}
	return str(str([]byte{0}, name), value)
}

// Over HTTP/2 a request's header block may come in CONTINUATION frames, on
// which net/http sets no ReadHeaderTimeout: what bounds a client sending
// one 100 bytes every 200 ms (far under MaxHeaderBytes) is IdleTimeout
// (docs/operations.md: 30 s, and the 64 KiB header limit). With IdleTimeout
// 2 s the dribbling connection is closed well before the 25 s given here.
func TestAnHTTP2HeaderBlockDribbledInContinuationFramesIsBoundByIdleTimeout(t *testing.T) {
	l := defaultLimits
	l.readHeader, l.read, l.write, l.idle = time.Second, 3*time.Second, 3*time.Second, 2*time.Second
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	addr := serveOnLoopback(t, ok, true, l)
	conn := dialH2(t, addr)
	closed := make(chan string, 1)
	go func() { // reads what the server sends: a GOAWAY or the end is a close
		hdr := make([]byte, 9)
		for {
			if _, err := io.ReadFull(conn, hdr); err != nil {
				closed <- err.Error()
				return
			}
			n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
			if _, err := io.CopyN(io.Discard, conn, int64(n)); err != nil {
				closed <- err.Error()
				return
			}
			if hdr[3] == 7 {
				closed <- "GOAWAY"
				return
			}
		}
	}()
	var block []byte
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":path", "/metrics"}, {":authority", "x"}} {
		block = append(block, hpackLiteral(f[0], f[1])...)
	}
	block = append(block, hpackLiteral("x-pad", strings.Repeat("a", 20<<10))...)
	out := []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	out = append(out, h2frame(4, 0, 0, nil)...)         // SETTINGS
	out = append(out, h2frame(4, 1, 0, nil)...)         // ACK of the server's
	out = append(out, h2frame(1, 1, 1, block[:100])...) // HEADERS, END_STREAM, no END_HEADERS
	if _, err := conn.Write(out); err != nil {
		t.Fatal(err)
	}
	const dribble = 25 * time.Second // the bound, 2 s, and room for a busy machine
	start := time.Now()
	for off := 100; time.Since(start) < dribble; off += 100 {
		select {
		case why := <-closed:
			t.Logf("closed by the server after %v (%s): IdleTimeout %v bounds the header block", time.Since(start).Round(time.Millisecond), why, l.idle)
			return
		case <-time.After(200 * time.Millisecond):
		}
		if off+100 >= len(block) {
			t.Fatal("the block ran out before the dribble ended")
		}
		if _, err := conn.Write(h2frame(9, 0, 1, block[off:off+100])); err != nil { // CONTINUATION
			t.Logf("closed by the server after %v (%v): IdleTimeout %v bounds the header block", time.Since(start).Round(time.Millisecond), err, l.idle)
			return
		}
	}
	t.Errorf("an HTTP/2 header block sent 100 bytes every 200 ms was still being accepted after %v (ReadHeaderTimeout %v, ReadTimeout %v, IdleTimeout %v): the server did not close the connection",
		dribble, l.readHeader, l.read, l.idle)
}
