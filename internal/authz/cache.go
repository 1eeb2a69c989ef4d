package authz

import (
	"crypto/sha256"
	"time"
)

// key is a hash: what a caller sends is never a key.
type key [sha256.Size]byte

// cache holds answers for a while, at most maxEntries of them and, when
// maxBytes > 0, at most maxBytes of their sizes. It is not safe for
// concurrent use (the Guard's mutex guards it).
type cache[V any] struct {
	m                           map[key]*entry[V]
	bytes, maxEntries, maxBytes int
}

type entry[V any] struct {
	v          V
	size       int
	expires    time.Time
	refreshAt  time.Time // zero: never refreshed ahead
	refreshing bool
}

func newCache[V any](maxEntries, maxBytes int) *cache[V] {
	return &cache[V]{m: map[key]*entry[V]{}, maxEntries: maxEntries, maxBytes: maxBytes}
}

// get returns k's answer if it has not expired; refresh says it is due a
// refresh ahead that nobody has started, and marks it started.
func (c *cache[V]) get(k key, now time.Time) (v V, found, refresh bool) {
	e, ok := c.m[k]
	if !ok {
		return v, false, false
	}
	if !now.Before(e.expires) {
		c.remove(k)
		return v, false, false
	}
	if !e.refreshAt.IsZero() && !now.Before(e.refreshAt) && !e.refreshing {
		e.refreshing, refresh = true, true
	}
	return e.v, true, refresh
}

// unmark lets the next get start a refresh ahead again.
func (c *cache[V]) unmark(k key) {
	if e, ok := c.m[k]; ok {
		e.refreshing = false
	}
}

func (c *cache[V]) remove(k key) {
	if e, ok := c.m[k]; ok {
		c.bytes -= e.size
		delete(c.m, k)
	}
}

// put keeps v for ttl; with ahead, get asks for a refresh after half of it.
// When full it drops the expired answers, then any: forgetting only costs a
// review later, it never lets anything in.
func (c *cache[V]) put(k key, v V, size int, now time.Time, ttl time.Duration, ahead bool) {
	c.remove(k)
	if c.maxBytes > 0 && size > c.maxBytes {
		return
	}
	full := func() bool { return len(c.m) >= c.maxEntries || (c.maxBytes > 0 && c.bytes+size > c.maxBytes) }
	if full() {
		for k, e := range c.m {
			if !now.Before(e.expires) {
				c.remove(k)
			}
		}
		for k := range c.m {
			if !full() {
				break
			}
			c.remove(k)
		}
	}
	e := &entry[V]{v: v, size: size, expires: now.Add(ttl)}
	if ahead {
		e.refreshAt = now.Add(ttl / 2)
	}
	c.m[k] = e
	c.bytes += size
}
