package metajson

import "bytes"

// LabelCache lets decoders that read one object after another (the
// objects of one watch stream or LIST page) give objects whose labels are
// written alike one map between them: it remembers the text of the last labels object
// read with it (up to labelCacheMax bytes) and the map made of it, and a
// labels object whose text starts where the decoder stands, byte for byte
// the same, gets that map, read by one compare, no allocation. A labels
// object's map is a function of its text alone (escapes, repeated keys and
// invalid UTF-8 included, however StringMap or Plain reads them), so the
// map is the one StringMap would make; and the text is the whole object,
// up to its closing brace, so what follows it does not matter.
//
// The map is shared by every object given it: no one may change it (the
// store's rule for the objects it holds, labels included; a store whose
// transform may change labels in place must not get such maps). What it
// costs when the labels differ from the last ones (every event of a
// stream whose labels alternate): a compare that stops at the first byte
// that differs, and a copy of the new text when it is not too long. What it
// holds: one map and at most labelCacheMax bytes. Not for use by two
// goroutines at once.
type LabelCache struct {
	text []byte
	m    map[string]string
}

// labelCacheMax bounds the text a LabelCache keeps: labels longer than this
// are decoded every time (they are rare, and copying them costs).
const labelCacheMax = 4 << 10

// labels reads an object's labels with StringMap, or from d's LabelCache.
func (d *Decoder) labels() (map[string]string, error) {
	c := d.opts.Labels
	if c == nil {
		return d.StringMap()
	}
	start := d.i
	if c.m != nil && d.depth < maxDepth && bytes.HasPrefix(d.b[start:], c.text) {
		d.i += len(c.text)
		return c.m, nil
	}
	m, err := d.StringMap()
	if text := d.b[start:d.i]; err == nil && len(text) <= labelCacheMax {
		if cap(c.text) < len(text) {
			c.text = make([]byte, 0, len(text)) // not append's growth, which could pass the bound
		}
		c.text = append(c.text[:0], text...)
		c.m = m
	}
	return m, err
}
