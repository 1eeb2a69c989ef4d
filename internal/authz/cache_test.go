package authz

import (
	"testing"
	"time"
)

// A cache holds at most maxEntries answers and maxBytes of their sizes;
// when full it forgets the expired ones first.
func TestTheCacheIsBoundedByCountAndBytes(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newCache[int](10, 500)
	for i := range 100 {
		c.put(key{byte(i)}, i, 100, now, time.Minute, false)
		if len(c.m) > 5 || c.bytes > 500 {
			t.Fatalf("after %d puts of 100 bytes: %d entries, %d bytes; bound 500 bytes", i+1, len(c.m), c.bytes)
		}
	}
	c.put(key{200}, 200, 501, now, time.Minute, false)
	if _, found, _ := c.get(key{200}, now); found {
		t.Error("an answer larger than the whole cache was kept")
	}
	counted := newCache[int](10, 0)
	for i := range 5 {
		counted.put(key{byte(i)}, i, 0, now, time.Second, false) // will expire
	}
	for i := 5; i < 10; i++ {
		counted.put(key{byte(i)}, i, 0, now, time.Hour, false)
	}
	later := now.Add(time.Minute)
	counted.put(key{10}, 10, 0, later, time.Hour, false)
	for i := 5; i <= 10; i++ {
		if _, found, _ := counted.get(key{byte(i)}, later); !found {
			t.Errorf("a live answer (%d) was dropped while expired ones could go", i)
		}
	}
	if len(counted.m) != 6 {
		t.Errorf("%d entries, want the 6 live ones", len(counted.m))
	}
}

// An answer is refreshed ahead once, by the first get after half its TTL,
// until unmarked.
func TestRefreshAheadIsAskedOnce(t *testing.T) {
	now := time.Unix(1000, 0)
	c := newCache[bool](10, 0)
	c.put(key{1}, true, 0, now, time.Minute, true)
	c.put(key{2}, false, 0, now, time.Minute, false)
	if _, _, refresh := c.get(key{1}, now.Add(29*time.Second)); refresh {
		t.Error("refresh asked before half the TTL")
	}
	half := now.Add(30 * time.Second)
	if _, _, refresh := c.get(key{1}, half); !refresh {
		t.Error("no refresh asked at half the TTL")
	}
	if _, _, refresh := c.get(key{1}, half); refresh {
		t.Error("a second refresh asked while the first runs")
	}
	c.unmark(key{1})
	if _, _, refresh := c.get(key{1}, half); !refresh {
		t.Error("no refresh asked after a failed one")
	}
	if _, _, refresh := c.get(key{2}, half); refresh {
		t.Error("refresh asked of an answer put without ahead")
	}
}
