package compare

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"rawwatch/codec"
	"rawwatch/reconcile/myresource"
)

// Report is the outcome of a run.
type Report struct {
	Date          string           `json:"date"`
	GoVersion     string           `json:"goVersion"`
	CPUs          int              `json:"cpus"`
	Objects       int              `json:"objects"`
	Payload       int              `json:"payloadBytes"`
	Applied       bool             `json:"serverSideApply"`
	PayloadKey    string           `json:"payloadAnnotation,omitempty"`
	Transform     string           `json:"transform"`
	UpdateTarget  float64          `json:"updateRateTarget"`
	Updates       int              `json:"updatesWritten"`
	UpdateRate    float64          `json:"updateRateAchieved"`
	Deletes       int              `json:"deletes"`
	Relist        bool             `json:"relistForced"`
	Wire          codec.Wire       `json:"wire"` // what the consumers were to ask for (Options.Wire)
	Phases        []Phase          `json:"phases"`
	Consumers     []ConsumerReport `json:"consumers"`
	Targets       []Target         `json:"targets"`
	AllCorrect    bool             `json:"allCorrect"`
	start         int64
	writesByPhase map[byte]int

	// APIServerCosts: each of Options.CostKinds run alone (alone.go);
	// IdleSeconds the idle sampling before each window.
	APIServerCosts []APIServerCost `json:"apiserverCosts,omitempty"`
	IdleSeconds    float64         `json:"idleSeconds,omitempty"`
}

// ConsumerReport holds one consumer's figures.
type ConsumerReport struct {
	Kind string `json:"kind"`
	// SyncSeconds is how long the initial sync took, from the consumer's start.
	SyncSeconds float64 `json:"syncSeconds"`
	// EventsPerSecond is the rate at which update events arrived during the
	// update phase (bounded by how fast the server accepted writes).
	EventsPerSecond float64 `json:"eventsPerSecond"`
	// Latency is write acknowledged → handler called, for updates and deletes.
	Latency LatencyStats `json:"latencyMs"`
	// Live heap (HeapAlloc right after a forced GC) and RSS at phase ends, bytes.
	HeapAfterSync    uint64 `json:"heapAfterSync"`
	HeapAfterUpdates uint64 `json:"heapAfterUpdates"`
	HeapAfterRelist  uint64 `json:"heapAfterRelist,omitempty"`
	RSSAfterSync     uint64 `json:"rssAfterSync"`
	// Peak heap in use (HeapInuse: live objects and garbage not yet
	// collected) and RSS, sampled every 100 ms during the relist.
	RelistPeakHeap uint64        `json:"relistPeakHeap,omitempty"`
	RelistPeakRSS  uint64        `json:"relistPeakRSS,omitempty"`
	Requests       RequestCounts `json:"requests"`
	Relists        int64         `json:"relists"`
	// WireAsked is the encoding the consumer asked for (JSON where the run
	// wanted CBOR and the kind cannot ask: CanAsk); WireRead what it read,
	// by the Content-Type of its responses ("cbor", "json", "cbor+json");
	// Bodies the response-body bytes by encoding.
	WireAsked codec.Wire `json:"wireAsked"`
	WireRead  string     `json:"wireRead"`
	Bodies    BodyBytes  `json:"bodyBytes"`
	Verdict   Verdict    `json:"verdict"`

	latencies []float64
	heap      [][2]float64 // seconds since start, MiB in use
}

// LatencyStats summarises delivery latencies in milliseconds.
type LatencyStats struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

// Verdict is a consumer's correctness, computed from what it recorded and
// what the server holds.
type Verdict struct {
	OK bool `json:"ok"`
	// Missing counts writes (updates, deletes) the consumer never delivered.
	Missing int `json:"missing"`
	// OutOfOrder counts events whose resourceVersion was older than the
	// previous event of the same key.
	OutOfOrder int `json:"outOfOrder"`
	// StoreChecked is false for consumers without a cache.
	StoreChecked bool `json:"storeChecked"`
	// Keys the server has and the cache does not, keys the cache has and the
	// server does not, keys with another resourceVersion.
	StoreMissing int `json:"storeMissing"`
	StoreExtra   int `json:"storeExtra"`
	StoreStale   int `json:"storeStale"`
}

func (v Verdict) String() string {
	if v.OK {
		if !v.StoreChecked {
			return "PASS (no cache)"
		}
		return "PASS"
	}
	var why []string
	for _, x := range []struct {
		n    int
		what string
	}{{v.Missing, "missing"}, {v.OutOfOrder, "out of order"}, {v.StoreMissing, "not cached"}, {v.StoreExtra, "extra"}, {v.StoreStale, "stale"}} {
		if x.n > 0 {
			why = append(why, fmt.Sprintf("%d %s", x.n, x.what))
		}
	}
	return "FAIL: " + strings.Join(why, ", ")
}

// Target is one of the project's goals, checked against this run.
type Target struct {
	Name  string  `json:"name"`
	Raw   string  `json:"raw"`
	Other string  `json:"other"`
	Ratio float64 `json:"ratio"`
	Limit string  `json:"limit"`
	Met   bool    `json:"met"`
	// Note, when set, says why this run cannot decide the target.
	Note string `json:"note,omitempty"`
	// AboveBaseline (storm only) is the ratio of what each side adds to the
	// peak of an apiserver restart with no client (0: not measured).
	AboveBaseline float64 `json:"aboveBaseline,omitempty"`
}

func (h *harness) report() (*Report, error) {
	r := &Report{
		Date: time.Now().UTC().Format(time.RFC3339), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(),
		Objects: h.opts.Objects, Payload: h.opts.Payload, Applied: h.opts.Apply, PayloadKey: h.opts.PayloadAnnotation, Transform: h.opts.Transform, UpdateTarget: h.opts.UpdateRate, Relist: h.relisted, Wire: h.opts.Wire,
		start: h.start.UnixNano(), writesByPhase: map[byte]int{},
		APIServerCosts: h.costs,
	}
	if len(h.costs) > 0 {
		r.IdleSeconds = h.idleFor().Seconds()
	}
	for _, p := range h.phases {
		p.StartS, p.EndS = float64(p.Start-r.start)/1e9, float64(p.End-r.start)/1e9
		r.Phases = append(r.Phases, p)
	}
	updateAck := map[string]int64{}
	deleteAck := map[string]int64{}
	for _, w := range h.writes {
		r.writesByPhase[w.Op]++
		switch w.Op {
		case EvUpdate:
			updateAck[w.RV] = w.Ack
		case EvDelete:
			deleteAck[w.Key] = w.Ack
		}
	}
	r.Updates, r.Deletes = r.writesByPhase[EvUpdate], r.writesByPhase[EvDelete]
	if up := r.phase("update"); up != nil {
		r.UpdateRate = float64(r.Updates) / (float64(up.End-up.Start) / 1e9)
	}
	r.AllCorrect = true
	for _, c := range h.consumers {
		cr, err := r.analyse(c, updateAck, deleteAck, h.serverRVs)
		if err != nil {
			return nil, err
		}
		r.AllCorrect = r.AllCorrect && cr.Verdict.OK
		r.Consumers = append(r.Consumers, *cr)
	}
	r.Targets = r.targets()
	return r, nil
}

func (r *Report) phase(name string) *Phase {
	for i := range r.Phases {
		if r.Phases[i].Name == name {
			return &r.Phases[i]
		}
	}
	return nil
}

func (r *Report) consumer(kind string) *ConsumerReport {
	for i := range r.Consumers {
		if r.Consumers[i].Kind == kind {
			return &r.Consumers[i]
		}
	}
	return nil
}

func (r *Report) analyse(c *child, updateAck, deleteAck map[string]int64, server map[string]string) (*ConsumerReport, error) {
	b, err := os.ReadFile(c.resultPath)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.kind, err)
	}
	var res ConsumerResult
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("%s: %w", c.kind, err)
	}
	cr := &ConsumerReport{Kind: c.kind, Requests: res.Requests, Relists: max(res.Requests.Lists()-1, 0),
		WireAsked: c.wire, WireRead: res.Bodies.Read(), Bodies: res.Bodies}
	if res.SyncedAt > 0 {
		cr.SyncSeconds = float64(res.SyncedAt-res.Begin) / 1e9
	}

	// Events: latency, order, missing writes, update-phase rate.
	f, err := os.Open(c.eventsPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	lastRV := map[string]int64{}
	seenUpdate := map[string]bool{}
	seenDelete := map[string]bool{}
	var firstUpd, lastUpd int64
	var updEvents int
	up := r.phase("update")
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		typ, rest, _ := bytes.Cut(line, []byte{' '})
		rvB, rest, _ := bytes.Cut(rest, []byte{' '})
		atB, key, _ := bytes.Cut(rest, []byte{' '})
		rv, _ := strconv.ParseInt(string(rvB), 10, 64)
		at, _ := strconv.ParseInt(string(atB), 10, 64)
		k := string(key)
		if prev, ok := lastRV[k]; ok && rv < prev {
			cr.Verdict.OutOfOrder++
		}
		lastRV[k] = rv
		switch typ[0] {
		case EvUpdate:
			if ack, ok := updateAck[string(rvB)]; ok && !seenUpdate[string(rvB)] {
				seenUpdate[string(rvB)] = true
				cr.latencies = append(cr.latencies, latencyMs(at, ack))
			}
			// Update-phase rate: events of the phase's writes (the relist's
			// probe updates come later and are left out).
			if up != nil && at >= up.Start && at <= up.End+int64(5*time.Second) {
				if firstUpd == 0 {
					firstUpd = at
				}
				lastUpd = at
				updEvents++
			}
		case EvDelete:
			if ack, ok := deleteAck[k]; ok && !seenDelete[k] {
				seenDelete[k] = true
				cr.latencies = append(cr.latencies, latencyMs(at, ack))
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	cr.Verdict.Missing = len(updateAck) - len(seenUpdate) + len(deleteAck) - len(seenDelete)
	if lastUpd > firstUpd {
		cr.EventsPerSecond = float64(updEvents) / (float64(lastUpd-firstUpd) / 1e9)
	}
	cr.Latency = stats(cr.latencies)

	// Memory.
	relist := r.phase("relist")
	for _, s := range res.Samples {
		switch s.Label {
		case "after-sync":
			cr.HeapAfterSync, cr.RSSAfterSync = s.HeapAlloc, s.RSS
		case "after-updates":
			cr.HeapAfterUpdates = s.HeapAlloc
		case "after-relist":
			cr.HeapAfterRelist = s.HeapAlloc
		case "":
			cr.heap = append(cr.heap, [2]float64{float64(s.At-r.start) / 1e9, float64(s.HeapInuse) / (1 << 20)})
			if relist != nil && s.At >= relist.Start && s.At <= relist.End {
				cr.RelistPeakHeap = max(cr.RelistPeakHeap, s.HeapInuse)
				cr.RelistPeakRSS = max(cr.RelistPeakRSS, s.RSS)
			}
		}
	}

	// The cache against a fresh LIST.
	if res.Store != nil {
		cr.Verdict.StoreChecked = true
		for k, rv := range server {
			got, ok := res.Store[k]
			switch {
			case !ok:
				cr.Verdict.StoreMissing++
			case got != rv:
				cr.Verdict.StoreStale++
			}
		}
		for k := range res.Store {
			if _, ok := server[k]; !ok {
				cr.Verdict.StoreExtra++
			}
		}
	}
	v := cr.Verdict
	cr.Verdict.OK = v.Missing == 0 && v.OutOfOrder == 0 && v.StoreMissing == 0 && v.StoreExtra == 0 && v.StoreStale == 0 && res.SyncedAt > 0
	return cr, nil
}

// latencyMs is the delivery latency of an event that arrived at at for a
// write acknowledged at ack. The apiserver sends the watch event and the
// writer's response at about the same time, and the event often wins; such
// an event counts as delivered with no latency rather than a negative one.
func latencyMs(at, ack int64) float64 { return float64(max(at-ack, 0)) / 1e6 }

func stats(ms []float64) LatencyStats {
	if len(ms) == 0 {
		return LatencyStats{}
	}
	s := slices.Clone(ms)
	slices.Sort(s)
	q := func(p float64) float64 { return s[min(len(s)-1, int(math.Ceil(p*float64(len(s))))-1)] }
	return LatencyStats{Count: len(s), P50: round(q(0.50)), P90: round(q(0.90)), P99: round(q(0.99)), Max: round(s[len(s)-1])}
}

func round(x float64) float64 { return math.Round(x*100) / 100 }

// targets checks the project's goals. Each raw consumer is compared with the
// informer that gets its initial state the same way: raw with informer-list
// (both LIST), raw-watchlist with informer (client-go's default WatchList).
func (r *Report) targets() []Target {
	var out []Target
	add := func(name string, raw, other *ConsumerReport, rv, ov float64, format func(float64) string, limit float64, lower bool) *Target {
		if raw == nil || other == nil || ov == 0 {
			return nil
		}
		ratio := rv / ov
		t := Target{Name: name, Raw: raw.Kind + " " + format(rv), Other: other.Kind + " " + format(ov), Ratio: math.Round(ratio*1000) / 1000}
		if lower {
			t.Limit, t.Met = fmt.Sprintf("≤ %.1f×", limit), ratio <= limit
		} else {
			t.Limit, t.Met = fmt.Sprintf("≥ %.1f×", limit), ratio >= limit
		}
		out = append(out, t)
		return &out[len(out)-1]
	}
	ms := func(x float64) string { return fmt.Sprintf("%.1f ms", x) }
	mib := func(x float64) string { return fmt.Sprintf("%.1f MiB", x/(1<<20)) }
	perS := func(x float64) string { return fmt.Sprintf("%.0f/s", x) }
	// When both kept up with the writes, this run measured the apiserver,
	// not them: BenchmarkDelivery decides.
	throughput := func(t *Target, a, b *ConsumerReport) {
		if t != nil && r.UpdateRate > 0 && math.Abs(a.EventsPerSecond/r.UpdateRate-1) < 0.02 &&
			math.Abs(b.EventsPerSecond/r.UpdateRate-1) < 0.02 {
			t.Met, t.Note = false, "bound by the apiserver: both kept up with every write (see BenchmarkDelivery)"
		}
	}
	bare := r.consumer(KindBare)
	for _, pair := range [][2]string{{KindRaw, KindInformerList}, {KindRawWatchList, KindInformer}} {
		raw, inf := r.consumer(pair[0]), r.consumer(pair[1])
		if raw == nil {
			continue
		}
		if inf != nil {
			add("latency p99 vs informer", raw, inf, raw.Latency.P99, inf.Latency.P99, ms, 1.0, true)
		}
		if bare != nil {
			add("latency p99 vs bare stream", raw, bare, raw.Latency.P99, bare.Latency.P99, ms, 1.2, true)
		}
		if inf != nil {
			throughput(add("throughput vs informer", raw, inf, raw.EventsPerSecond, inf.EventsPerSecond, perS, 1.0, false), raw, inf)
			add("steady heap vs informer", raw, inf, float64(raw.HeapAfterSync), float64(inf.HeapAfterSync), mib, 0.8, true)
			if r.Payload > 0 && r.Applied {
				// Issue 11's goal for objects of real size with real managedFields.
				perObject := func(x float64) string { return fmt.Sprintf("%.0f B", x) }
				add("heap per object vs informer (applied, with payload)", raw, inf,
					float64(raw.HeapAfterSync)/float64(r.Objects), float64(inf.HeapAfterSync)/float64(r.Objects), perObject, 0.7, true)
			}
			add("relist peak heap vs informer", raw, inf, float64(raw.RelistPeakHeap), float64(inf.RelistPeakHeap), mib, 0.7, true)
		}
	}
	// The same goals against the best anchor for each measure: whichever
	// informer or controller-runtime did best, as people set them up.
	raw := r.consumer(KindRaw)
	if raw == nil || !raw.Verdict.OK {
		return out
	}
	best := func(value func(*ConsumerReport) float64, lower bool) *ConsumerReport {
		var b *ConsumerReport
		for _, kind := range Anchors {
			c := r.consumer(kind)
			if c == nil || !c.Verdict.OK || value(c) <= 0 {
				continue
			}
			if b == nil || lower && value(c) < value(b) || !lower && value(c) > value(b) {
				b = c
			}
		}
		return b
	}
	for _, m := range []struct {
		name   string
		value  func(*ConsumerReport) float64
		format func(float64) string
		limit  float64
		lower  bool
	}{
		{"latency p99 vs best anchor", func(c *ConsumerReport) float64 { return c.Latency.P99 }, ms, 1.0, true},
		{"throughput vs best anchor", func(c *ConsumerReport) float64 { return c.EventsPerSecond }, perS, 1.0, false},
		{"steady heap vs best anchor", func(c *ConsumerReport) float64 { return float64(c.HeapAfterSync) }, mib, 0.8, true},
		{"relist peak heap vs best anchor", func(c *ConsumerReport) float64 { return float64(c.RelistPeakHeap) }, mib, 0.7, true},
	} {
		if b := best(m.value, m.lower); b != nil {
			t := add(m.name, raw, b, m.value(raw), m.value(b), m.format, m.limit, m.lower)
			if strings.HasPrefix(m.name, "throughput") {
				throughput(t, raw, b)
			}
		}
	}
	return out
}

// Anchors are the consumers the raw watcher is measured against: client-go's
// informer (with and without WatchList, with managedFields stripped) and
// controller-runtime.
var Anchors = []string{KindInformer, KindInformerList, KindInformerStripped, KindControllerRuntime}

// metCell is the "met" cell of a target's row: yes, **no**, or, with a
// note, noted (after the prefix the report chooses).
func (t Target) metCell(notePrefix string) string {
	switch {
	case t.Note != "":
		return notePrefix + t.Note
	case !t.Met:
		return "**no**"
	}
	return "yes"
}

// Markdown renders the report as tables.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "### Comparison run, %s\n\n", r.Date)
	written := "created and updated"
	if r.Applied {
		written = "written with server-side apply"
	}
	fmt.Fprintf(&b, "%d objects (payload %d B in %s, %s), %d updates at %.0f/s (target %.0f/s), %d deletes, relist forced: %v, wire asked for: %s; %s, %d CPUs.\n",
		r.Objects, r.Payload, r.PayloadKey, written, r.Updates, r.UpdateRate, r.UpdateTarget, r.Deletes, r.Relist, r.Wire, r.GoVersion, r.CPUs)
	fmt.Fprintf(&b, "Caches drop %s: %s.\n\n", strings.Join(myresource.UnreadAnnotations, ", "), map[string]string{
		TransformRaw:  "the raw consumers' (as rawwatch does by default) and informer-stripped's; the other informers and controller-runtime keep every annotation",
		TransformAll:  "every consumer's (the informers with SetTransform, controller-runtime with its cache's DefaultTransform)",
		TransformNone: "no consumer's",
	}[r.Transform])
	b.WriteString("| consumer | wire read (body bytes) | initial sync | events/s | latency p50 / p90 / p99 / max | live heap after sync / updates | heap per object | RSS after sync | relist peak heap / RSS | LIST / WATCH requests | relists | verdict |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range r.Consumers {
		fmt.Fprintf(&b, "| %s | %s | %.2f s | %.0f | %.1f / %.1f / %.1f / %.1f ms | %s / %s | %.0f B | %s | %s / %s | %d / %d | %d | %s |\n",
			c.Kind, c.wireCell(r.Wire), c.SyncSeconds, c.EventsPerSecond, c.Latency.P50, c.Latency.P90, c.Latency.P99, c.Latency.Max,
			mib(c.HeapAfterSync), mib(c.HeapAfterUpdates), float64(c.HeapAfterSync)/float64(max(r.Objects, 1)),
			mib(c.RSSAfterSync), mib(c.RelistPeakHeap), mib(c.RelistPeakRSS),
			c.Requests.ListPages, c.Requests.Watches, c.Relists, c.Verdict)
	}
	if len(r.Targets) > 0 {
		b.WriteString("\n| target | raw | compared with | ratio | goal | met |\n|---|---|---|---|---|---|\n")
		for _, t := range r.Targets {
			fmt.Fprintf(&b, "| %s | %s | %s | %.3f | %s | %s |\n", t.Name, t.Raw, t.Other, t.Ratio, t.Limit, t.metCell("n/a: "))
		}
	}
	r.costMarkdown(&b)
	return b.String()
}

// wireCell says what a consumer read and how much, and, in a run that
// wanted CBOR, why it read JSON: it cannot ask, or it asked and got JSON.
func (c ConsumerReport) wireCell(wanted codec.Wire) string {
	read := c.WireRead
	if read == "" {
		read = "–"
	}
	cell := fmt.Sprintf("%s (%s)", read, mib(uint64(c.Bodies.CBOR+c.Bodies.JSON)))
	switch {
	case wanted != codec.WireCBOR:
	case c.WireAsked != codec.WireCBOR:
		cell += ": cannot ask for cbor"
	case c.WireRead != "cbor":
		cell = "**" + cell + "**: asked for cbor"
	}
	return cell
}

func mib(x uint64) string {
	if x == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f MiB", float64(x)/(1<<20))
}

// Write stores the report as report.md, report.json and report.svg in dir.
func (r *Report) Write(dir string) error {
	return writeReport(dir, "report", r, r.Markdown(), r.SVG())
}
