package metajson

import "bytes"

// FieldsCache lets a decoder that reads one object after another (the
// objects of one watch stream) check a managedFields entry's fieldsV1 by one
// compare when its text is one it checked before: the same manager writes
// the same fields of objects alike, so a stream repeats a few such texts.
// A JSON object's text ends at its closing brace, so a text that starts
// where the decoder stands, byte for byte one that skip took whole, is that
// value, and skip would take it again (at that nesting or less: it declines
// past maxDepth). It holds fieldsCacheSlots texts of at most fieldsCacheMax
// bytes; a new one replaces one not met since the last replacement passed
// it (a clock), so the texts that recur stay while those of one object
// (an entry naming its owner's UID) come and go. Not for use by two
// goroutines at once.
type FieldsCache struct {
	slots [fieldsCacheSlots]struct {
		text  []byte
		depth int  // the decoder's depth it was checked at
		met   bool // met again since the clock passed
	}
	next int
}

const (
	fieldsCacheSlots = 4       // a few managers' entries, read in turn
	fieldsCacheMax   = 4 << 10 // longer texts are checked every time
)

// skipFields skips a fieldsV1 value as skip does, through d's FieldsCache.
func (d *Decoder) skipFields() error {
	c := d.opts.Fields
	if c == nil {
		return d.skip()
	}
	rest := d.b[d.i:]
	for i := range c.slots {
		s := &c.slots[i]
		if len(s.text) > 0 && d.depth <= s.depth && bytes.HasPrefix(rest, s.text) {
			d.i += len(s.text)
			s.met = true
			return nil
		}
	}
	start := d.i
	if err := d.skip(); err != nil {
		return err
	}
	if text := d.b[start:d.i]; len(text) <= fieldsCacheMax && text[0] == '{' {
		for c.slots[c.next].met {
			c.slots[c.next].met = false
			c.next = (c.next + 1) % fieldsCacheSlots
		}
		s := &c.slots[c.next]
		c.next = (c.next + 1) % fieldsCacheSlots
		if cap(s.text) < len(text) {
			s.text = make([]byte, 0, len(text))
		}
		s.text, s.depth = append(s.text[:0], text...), d.depth
	}
	return nil
}
