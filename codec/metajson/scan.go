// Package metajson decodes Kubernetes objects from JSON without reflection,
// exactly as Kubernetes' own decoder (sigs.k8s.io/json, case-sensitive) does,
// or not at all.
//
// Plain is that decoder, the oracle. A Decoder reads one JSON text in a single
// pass and hands each object member's key to the caller, which reads the value
// with the Decoder's typed readers (String, Int64, Time, Labels, ...) or skips
// it; ObjectMeta and TypeMeta are read here, an API type's own fields by its
// package (api/v1alpha1). Every reader either produces what Plain would, or
// returns ErrDecline; Delegate reads one value with Plain, for fields too rare
// to be worth code of their own (deletionGracePeriodSeconds). The caller of a whole decode treats any error
// as "decode it with Plain": so the result of decoding is always Plain's, and a
// fast decode only ever saves time (a fuzz target holds the two equal, see
// api/v1alpha1). What makes a decode decline: input that is not valid JSON, a
// key that appears twice in one object (encoding/json merges such members), an
// escaped key, a value of the wrong type, a number that is not a plain integer,
// null where a reader does not expect it (inside a value skipped whole, whose
// keys nothing reads, only its validity counts). Valid JSON is checked exactly as
// encoding/json checks it: strings may hold invalid UTF-8 (a reader that meets
// it delegates, as encoding/json replaces it), but no raw control characters.
//
// Inside Batch, the plain strings StringTo reads of one object come in one
// allocation, parts of one string (no unsafe): one object's, never shared.
package metajson

import (
	"encoding/binary"
	"errors"
	"math/bits"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	kjson "sigs.k8s.io/json"
)

// ErrDecline says the fast decoder will not decode this input: decode it with
// Plain, whose result (or error) is the answer.
var ErrDecline = errors.New("metajson: declined, decode with the plain decoder")

// Plain decodes data into v as Kubernetes decodes objects: encoding/json's
// rules with keys matched case-sensitively (sigs.k8s.io/json).
func Plain(data []byte, v any) error {
	return kjson.UnmarshalCaseSensitivePreserveInts(data, v)
}

// IsSyntaxError tells whether err (from Plain) says its input is not JSON.
func IsSyntaxError(err error) bool {
	is, _ := kjson.SyntaxErrorOffset(err)
	return is
}

// Decoder reads one JSON text.
type Decoder struct {
	b     []byte
	i     int
	depth int // objects and arrays open
	opts  Options
	// Batch's strings, made at its end: StringTo's destinations and
	// spans of b, the first n of later (a fixed array: a Decoder made per
	// object allocates nothing more for them).
	batching bool
	n        int
	later    [8]laterString
}

type laterString struct {
	dst  *string
	s, e int
}

// Options change what a Decoder makes of an object.
type Options struct {
	// NewestWriteOnly reduces managedFields to one entry holding only the
	// newest time of all entries (none if no entry has one; managedFields
	// null or absent stay nil), reading nothing else of them but checking
	// that Plain would take them. That entry is all a watch event's
	// object needs (watcher.WrittenAt), and building every entry, each
	// with its fieldsV1, costs more than the rest of the object.
	NewestWriteOnly bool
	// Labels, when set, gives an object whose labels are written as the
	// last ones read with it the same map again (see LabelCache).
	Labels *LabelCache
	// Fields, when set, checks a managedFields entry's fieldsV1 that is
	// written as one checked before by one compare (see FieldsCache).
	Fields *FieldsCache
}

// NewDecoder reads data.
func NewDecoder(data []byte, opts Options) *Decoder { return &Decoder{b: data, opts: opts} }

// Reset makes d read data, as NewDecoder(data, opts) would: for a caller
// that decodes one text after another with one Decoder (the Decoder keeps
// data only until the next Reset; what it decodes never points into it).
func (d *Decoder) Reset(data []byte, opts Options) { *d = Decoder{b: data, opts: opts} }

// Options are the options the decoder was made with.
func (d *Decoder) Options() Options { return d.opts }

// Object reads the JSON object that is the whole input (whitespace around it
// allowed), calling member for each member as Members does.
func (d *Decoder) Object(member func(key []byte) error) error {
	return d.Whole(func() error { return d.Members(member) })
}

// Whole reads the JSON value that is the whole input (whitespace around it
// allowed) with value, which must read one value.
func (d *Decoder) Whole(value func() error) error {
	d.ws()
	if err := value(); err != nil {
		return err
	}
	d.ws()
	if d.i != len(d.b) {
		return ErrDecline
	}
	return nil
}

// Offset is where the decoder stands in its input: after a value was read,
// just past it.
func (d *Decoder) Offset() int { return d.i }

// PlainString reads a string whose inside needs no unescaping (no escapes,
// valid UTF-8) and returns that inside, a part of the input.
func (d *Decoder) PlainString() ([]byte, error) {
	return d.key()
}

// Members reads an object: for each member, member gets the key (unescaped
// keys only) and must read the value (with a reader, Null, Skip or
// Delegate). Keys are not checked for repeats: see Seen.
func (d *Decoder) Members(member func(key []byte) error) error {
	return d.items('{', '}', nil, member)
}

// member reads a member's key and colon, then calls member.
func (d *Decoder) member(member func(key []byte) error) error {
	key, err := d.key()
	if err != nil {
		return err
	}
	d.ws()
	if d.i >= len(d.b) || d.b[d.i] != ':' {
		return ErrDecline
	}
	d.i++
	d.ws()
	return member(key)
}

// Seen records field n (below 64) of one object as read and declines when it
// was read before: encoding/json merges a repeated member into the first,
// which the readers do not reproduce.
func Seen(seen *uint64, n int) error {
	if *seen&(1<<n) != 0 {
		return ErrDecline
	}
	*seen |= 1 << n
	return nil
}

// Null consumes a null. On a field read for the first time (Seen), null
// leaves it as it is, in every type the readers know: zero.
func (d *Decoder) Null() bool { return d.literal("null") }

// Elements reads an array, calling element with the decoder at each element
// (null included).
func (d *Decoder) Elements(element func() error) error {
	return d.items('[', ']', element, nil)
}

// items reads the comma-separated items of the object or array opening with
// open at the decoder, calling at each element (an array's) or, with the
// key read, member (an object's).
func (d *Decoder) items(open, close byte, element func() error, member func(key []byte) error) error {
	if d.i >= len(d.b) || d.b[d.i] != open || d.depth >= maxDepth {
		return ErrDecline
	}
	d.i++
	d.depth++
	defer func() { d.depth-- }()
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == close {
		d.i++
		return nil
	}
	for {
		var err error
		if member != nil {
			err = d.member(member)
		} else {
			err = element()
		}
		if err != nil {
			return err
		}
		d.ws()
		if d.i >= len(d.b) {
			return ErrDecline
		}
		switch d.b[d.i] {
		case ',':
			d.i++
			d.ws()
		case close:
			d.i++
			return nil
		default:
			return ErrDecline
		}
	}
}

// key reads an object key that needs no unescaping; the usual one, plain
// ASCII, without stringSpan's call.
func (d *Decoder) key() ([]byte, error) {
	if s := d.i + 1; s <= len(d.b) && d.b[d.i] == '"' {
		if e := plainRun(d.b, s); e < len(d.b) && d.b[e] == '"' {
			d.i = e + 1
			return d.b[s:e], nil
		}
	}
	s, e, plain, err := d.stringSpan()
	if err != nil || !plain {
		return nil, ErrDecline
	}
	return d.b[s:e], nil
}

// String reads a string.
func (d *Decoder) String() (string, error) {
	start := d.i
	s, e, plain, err := d.stringSpan()
	if err != nil {
		return "", err
	}
	if plain {
		return string(d.b[s:e]), nil
	}
	var v string
	return v, d.plain(start, &v)
}

// StringTo reads a string into *dst, as *dst, err = d.String() would. Inside
// Batch it may assign only at Batch's end, when the read succeeds, and not
// at all when it fails: *dst must stay where it is (a field of the object
// being read, not of a value that is copied before) and nothing may read it
// until then.
func (d *Decoder) StringTo(dst *string) error {
	start := d.i
	if d.batching && d.n < len(d.later) {
		s, e, plain, err := d.stringSpan()
		if err != nil {
			return err
		}
		if plain {
			d.later[d.n] = laterString{dst, s, e}
			d.n++
			return nil
		}
		d.i = start
	}
	v, err := d.String()
	*dst = v
	return err
}

// Batch calls read (which reads one object) and makes all the strings that
// StringTo reads meanwhile in one allocation, one string whose parts they
// are, assigned when read returns nil. When read fails (the object is
// declined), none of those is assigned, and nothing of them stays with the
// Decoder; the strings StringTo makes one by one (escaped, invalid UTF-8,
// beyond the eighth) were assigned as they were read: a declined object's
// state is unspecified, and it is not used (the plain decoder makes another).
// Batch inside Batch is read itself: the outer one makes the strings.
//
// One object's strings in one block: who keeps any one of them (an
// object's name, say) keeps the whole block alive, at most the sum of
// those strings' lengths. So a Batch reads one object, never more: a block
// shared by objects would keep every one's strings while any lives.
func (d *Decoder) Batch(read func() error) error {
	if d.batching {
		return read()
	}
	d.batching = true
	err := read()
	d.batching = false
	later := d.later[:d.n]
	d.n = 0
	if err == nil {
		size := 0
		for _, l := range later {
			size += l.e - l.s
		}
		var all strings.Builder
		all.Grow(size)
		for _, l := range later {
			all.Write(d.b[l.s:l.e])
		}
		s, at := all.String(), 0
		for _, l := range later {
			if l.e > l.s {
				*l.dst = s[at : at+l.e-l.s]
			} else {
				*l.dst = ""
			}
			at += l.e - l.s
		}
	}
	clear(later) // the destinations: the object is not the Decoder's to keep
	return err
}

// SharedString reads a string as String does, but returns the copy it made
// before when the same value was read recently, so that the strings every
// object of a type and namespace repeats (apiVersion, kind, namespace)
// cost no allocation per object (a string is immutable: sharing one copy is
// as good as one each). The recent values are a small table of at most
// sharedSlots strings of up to sharedMax bytes, shared by every Decoder.
func (d *Decoder) SharedString() (string, error) {
	start := d.i
	s, e, plain, err := d.stringSpan()
	if err != nil || !plain || e-s > sharedMax {
		d.i = start
		return d.String()
	}
	return intern(d.b[s:e]), nil
}

// intern is string(b), the copy in the shared table when it holds one
// (b is at most sharedMax bytes).
func intern(b []byte) string {
	h := internHash(b)
	// Two slots to choose from, so that two strings met in turn seldom
	// keep taking each other's place; a new one takes an empty slot, else
	// the one the hash's high bit picks.
	a, c := &shared[h%sharedSlots], &shared[(h>>16)%sharedSlots]
	pa, pc := a.Load(), c.Load()
	switch {
	case pa != nil && *pa == string(b):
		return *pa
	case pc != nil && *pc == string(b):
		return *pc
	}
	v := string(b)
	if pa != nil && (pc == nil || h>>31 == 1) {
		a = c
	}
	a.Store(&v)
	return v
}

const sharedSlots, sharedMax = 256, 64

// internHash hashes b eight bytes at a time (FNV-1a's step on words, each
// product's high half folded into its low one, which the next step and the
// slots use): a few multiplies for a key, not one a byte.
func internHash(b []byte) uint32 {
	const prime = 1099511628211
	h := uint64(14695981039346656037) ^ uint64(len(b))
	for ; len(b) >= 8; b = b[8:] {
		h = (h ^ binary.LittleEndian.Uint64(b)) * prime
		h ^= h >> 32
	}
	var tail uint64
	for i, c := range b {
		tail |= uint64(c) << (8 * i)
	}
	h = (h ^ tail) * prime
	return uint32(h ^ h>>32)
}

var shared [sharedSlots]atomic.Pointer[string]

// stringSpan reads a string and returns its inside [s, e); plain is false
// when the inside has escapes or invalid UTF-8 (then encoding/json's
// unquoting must make the value).
func (d *Decoder) stringSpan() (s, e int, plain bool, err error) {
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return 0, 0, false, ErrDecline
	}
	s = d.i + 1
	plain = true
	ascii := true
	for i := s; i < len(d.b); i++ {
		i = plainRun(d.b, i)
		for i < len(d.b) && plainByte[d.b[i]] {
			i++
		}
		if i == len(d.b) {
			break
		}
		switch c := d.b[i]; {
		case c == '"':
			if !ascii && plain && !utf8.Valid(d.b[s:i]) {
				plain = false
			}
			d.i = i + 1
			return s, i, plain, nil
		case c == '\\':
			plain = false
			if i = escapeEnd(d.b, i); i < 0 {
				return 0, 0, false, ErrDecline
			}
		case c < 0x20:
			return 0, 0, false, ErrDecline
		case c >= 0x80:
			ascii = false
		}
	}
	return 0, 0, false, ErrDecline
}

// escapeEnd is the index of the last byte of the valid escape at b[i] (a
// backslash), -1 if there is none.
func escapeEnd(b []byte, i int) int {
	i++
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return i
	case 'u':
		if i+4 >= len(b) {
			return -1
		}
		for _, h := range b[i+1 : i+5] {
			if !isHex(h) {
				return -1
			}
		}
		return i + 4
	}
	return -1
}

// plainRun is the index of the first byte from b[i] on that plainByte
// does not take, or, in the last 7 bytes of b, one before it: it tests
// eight bytes at a time (the "has a zero byte" test, (y-0x01…01)&^y&0x80…80,
// for a quote, a backslash, a byte below 0x20; and the high bit for a byte
// of 0x80 or more). A false match shows only above a true one (a borrow
// goes up), so the lowest match is the byte.
func plainRun(b []byte, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q, bs := x^'"'*ones, x^'\\'*ones
		if m := ((q-ones)&^q | (bs-ones)&^bs | (x-0x20*ones)&^x | x) & highs; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	return i
}

// plainByte tells the bytes a string's inside may hold with no more ado:
// not a quote, a backslash, a control character or part of a multi-byte
// UTF-8 sequence.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// Int64 reads an integer that fits in an int64; a fraction, an exponent or
// an overflow declines (encoding/json refuses them for an int64).
func (d *Decoder) Int64() (int64, error) {
	s := d.i
	i := s
	if i < len(d.b) && d.b[i] == '-' {
		i++
	}
	digits := i
	for i < len(d.b) && '0' <= d.b[i] && d.b[i] <= '9' {
		i++
	}
	if i == digits || (d.b[digits] == '0' && i > digits+1) {
		return 0, ErrDecline
	}
	if i < len(d.b) && (d.b[i] == '.' || d.b[i] == 'e' || d.b[i] == 'E') {
		return 0, ErrDecline
	}
	n, err := strconv.ParseInt(string(d.b[s:i]), 10, 64)
	if err != nil {
		return 0, ErrDecline
	}
	d.i = i
	return n, nil
}

// Skip reads any valid JSON value and returns it.
func (d *Decoder) Skip() ([]byte, error) {
	start := d.i
	if err := d.skip(); err != nil {
		return nil, err
	}
	return d.b[start:d.i], nil
}

// maxDepth bounds nesting (and the recursion that reads it): deeper input
// declines, and Plain decodes it (encoding/json refuses beyond 10,000).
const maxDepth = 1000

func (d *Decoder) skip() error {
	// One loop over the value, no recursion and no calls per member: what
	// it accepts is what encoding/json accepts (a key is any string here:
	// nothing reads it). open holds the containers open, a bit each, set
	// for an object; depth counts those of the callers too (maxDepth).
	var open [maxDepth/64 + 1]uint64
	n := 0 // containers open inside the value
	b := d.b
	i := d.i
	var err error
value: // a value starts at i
	if i >= len(b) {
		return ErrDecline
	}
	switch c := b[i]; {
	case c == '{', c == '[':
		if d.depth+n >= maxDepth {
			return ErrDecline
		}
		if c == '{' {
			open[n/64] |= 1 << (n % 64)
		} else {
			open[n/64] &^= 1 << (n % 64)
		}
		n++
		i = skipWS(b, i+1)
		if i < len(b) && (b[i] == '}' && c == '{' || b[i] == ']' && c == '[') {
			i++
			n--
			goto after
		}
		if c == '{' {
			goto key
		}
		goto value
	case c == '"':
		if i, err = stringEnd(b, i); err != nil {
			return err
		}
	case c == 't':
		i, err = literalEnd(b, i, "true")
	case c == 'f':
		i, err = literalEnd(b, i, "false")
	case c == 'n':
		i, err = literalEnd(b, i, "null")
	case c == '-' || '0' <= c && c <= '9':
		i, err = numberEnd(b, i)
	default:
		return ErrDecline
	}
	if err != nil {
		return err
	}
after: // a value ended at i
	if n == 0 {
		d.i = i
		return nil
	}
	i = skipWS(b, i)
	if i >= len(b) {
		return ErrDecline
	}
	switch inObject := open[(n-1)/64]&(1<<((n-1)%64)) != 0; {
	case b[i] == ',':
		i = skipWS(b, i+1)
		if inObject {
			goto key
		}
		goto value
	case b[i] == '}' && inObject, b[i] == ']' && !inObject:
		i++
		n--
		goto after
	}
	return ErrDecline
key: // a member starts at i
	if i >= len(b) || b[i] != '"' {
		return ErrDecline
	}
	if i, err = stringEnd(b, i); err != nil {
		return err
	}
	i = skipWS(b, i)
	if i >= len(b) || b[i] != ':' {
		return ErrDecline
	}
	i = skipWS(b, i+1)
	goto value
}

// stringEnd is the index just past the string at b[i] (a quote), valid as
// stringSpan checks it: what it accepts, not what it makes of it.
func stringEnd(b []byte, i int) (int, error) {
	for i++; ; i++ {
		i = plainRun(b, i)
		for i < len(b) && plainByte[b[i]] {
			i++
		}
		if i >= len(b) {
			return 0, ErrDecline
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, nil
		case c == '\\':
			if i = escapeEnd(b, i); i < 0 {
				return 0, ErrDecline
			}
		case c < 0x20:
			return 0, ErrDecline
		}
	}
}

func literalEnd(b []byte, i int, lit string) (int, error) {
	if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
		return i + len(lit), nil
	}
	return 0, ErrDecline
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// numberEnd is the index just past the number at b[i].
func numberEnd(b []byte, i int) (_ int, err error) {
	if b[i] == '-' {
		i++
	}
	if i < len(b) && b[i] == '0' {
		i++
	} else if i, err = digits(b, i); err != nil {
		return 0, err
	}
	if i < len(b) && b[i] == '.' {
		if i, err = digits(b, i+1); err != nil {
			return 0, err
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i, err = digits(b, i); err != nil {
			return 0, err
		}
	}
	return i, nil
}

// digits is the index just past the digits at b[i], one at least.
func digits(b []byte, i int) (int, error) {
	start := i
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	if i == start {
		return 0, ErrDecline
	}
	return i, nil
}

// literal consumes lit if the input has it here.
func (d *Decoder) literal(lit string) bool {
	if len(d.b)-d.i >= len(lit) && string(d.b[d.i:d.i+len(lit)]) == lit {
		d.i += len(lit)
		return true
	}
	return false
}

// Delegate reads the next value with Plain into v (a pointer to a fresh
// field): for the fields too rare to read by hand.
func (d *Decoder) Delegate(v any) error {
	return d.plain(d.i, v)
}

// plain skips the value at start (re-reading it if the caller already
// began) and decodes it with Plain.
func (d *Decoder) plain(start int, v any) error {
	d.i = start
	span, err := d.Skip()
	if err != nil {
		return err
	}
	if Plain(span, v) != nil {
		return ErrDecline
	}
	return nil
}

// ws skips whitespace; the usual case, none (compact JSON), inline.
func (d *Decoder) ws() {
	if d.i < len(d.b) && d.b[d.i] > ' ' {
		return
	}
	d.i = skipWS(d.b, d.i)
}
