package sharding

import "rawwatch/queue"

// burstKeys is queue's: a line drained after more keys than this drops its
// array.
const burstKeys = 64

// DeletionsFirst is a queue.Order (queue.NewOrdered) that hands out the
// keys first says have a deletion to handle before all others, in the
// order they became ready; the others after them, in theirs. A sharded
// controller's deletions go first: a change a worker reaches late is still
// read from the store, but a deletion a replica does not reach before its
// slot moves (a fence, a handoff) is heard of by no replica.
//
// first is asked, under the queue's lock, when a key becomes ready (Push)
// and when a waiting key is added again (Touch: a key that waits among the
// others and now has a deletion moves ahead, in constant time, its place
// among the others left stale). A key among the others waits behind at
// most the deletions that became ready while it waited, and those being
// handled when it was queued.
type DeletionsFirst struct {
	first func(key string) bool
	// urgent: the keys with a deletion, oldest first; others: the rest,
	// each entry numbered; at: each waiting key's number in others (0:
	// in urgent); an entry of others whose number is not its key's is
	// stale (the key moved, or left) and skipped.
	urgent, others line
	at             map[string]uint64
	seq            uint64
	live           int // entries of others not stale
	peak           int // the most keys in at since it was made
}

// NewDeletionsFirst returns an empty DeletionsFirst; first must not call
// the queue.
func NewDeletionsFirst(first func(key string) bool) *DeletionsFirst {
	return &DeletionsFirst{first: first, at: map[string]uint64{}}
}

var _ queue.Order = (*DeletionsFirst)(nil)

func (o *DeletionsFirst) Push(key string) {
	if o.first(key) {
		o.at[key] = 0
		o.urgent.push(entry{key: key})
	} else {
		o.seq++
		o.at[key] = o.seq
		o.others.push(entry{key: key, seq: o.seq})
		o.live++
	}
	o.peak = max(o.peak, len(o.at))
}

func (o *DeletionsFirst) Touch(key string) {
	if seq := o.at[key]; seq == 0 || !o.first(key) {
		return
	}
	o.at[key] = 0 // its entry in others goes stale
	o.live--
	o.urgent.push(entry{key: key})
	if len(o.others.keys) > 2*o.live+burstKeys {
		o.compact()
	}
}

func (o *DeletionsFirst) Pop() string {
	var key string
	if len(o.urgent.keys) > 0 {
		key = o.urgent.pop().key
	} else {
		for {
			if e := o.others.pop(); o.at[e.key] == e.seq { // not stale
				key = e.key
				o.live--
				break
			}
		}
	}
	delete(o.at, key)
	if o.live == 0 { // stale entries go too
		o.others.reset()
	}
	if len(o.urgent.keys) == 0 {
		o.urgent.reset()
	}
	if len(o.at) == 0 && o.peak > burstKeys { // a burst grew the map
		o.at, o.peak = map[string]uint64{}, 0
	}
	return key
}

func (o *DeletionsFirst) Len() int { return len(o.urgent.keys) + o.live }

// Peek reads at most max entries of urgent and 2·max+burstKeys of others:
// it may show fewer than max keys when many moved ahead from others.
func (o *DeletionsFirst) Peek(max int) []string {
	var out []string
	for _, e := range o.urgent.keys[:min(max, len(o.urgent.keys))] {
		out = append(out, e.key)
	}
	for _, e := range o.others.keys[:min(2*max+burstKeys, len(o.others.keys))] {
		if len(out) >= max {
			break
		}
		if o.at[e.key] == e.seq && e.seq != 0 {
			out = append(out, e.key)
		}
	}
	return out
}

// compact drops the stale entries of others, keeping the live ones in
// their order: called once they outnumber the live ones (and a burst's
// worth), so that others holds at most about twice the keys waiting in it,
// however many moved, at a cost spread over the moves.
func (o *DeletionsFirst) compact() {
	live := o.others.keys[:0]
	for _, e := range o.others.keys {
		if o.at[e.key] == e.seq {
			live = append(live, e)
		}
	}
	clear(o.others.keys[len(live):])
	o.others.keys = live
}

// line is a line of keys: pop takes them from its front; buf is the whole
// backing array, for reuse once the line drains.
type line struct {
	keys []entry
	buf  []entry
}

type entry struct {
	key string
	seq uint64 // in others: the key's number when queued
}

func (l *line) push(e entry) {
	n := cap(l.keys)
	l.keys = append(l.keys, e)
	if cap(l.keys) != n { // a new array
		l.buf = l.keys
	}
}

func (l *line) pop() entry {
	e := l.keys[0]
	l.keys[0] = entry{}
	l.keys = l.keys[1:]
	return e
}

// reset empties the line; after a burst (burstKeys) it drops its array.
func (l *line) reset() {
	if cap(l.buf) > burstKeys {
		l.buf = nil
	}
	clear(l.keys)
	l.keys = l.buf[:0]
}
