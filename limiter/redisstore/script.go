package redisstore

import (
	"context"
	_ "embed"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/costguard/costguard/limiter"
)

var (
	//go:embed common.lua
	commonLua string
	//go:embed persist.lua
	persistLua string
	//go:embed bucket.lua
	bucketLua string
	//go:embed fixed_window.lua
	fixedWindowLua string
	//go:embed sliding_counter.lua
	slidingCounterLua string
	//go:embed sliding_log.lua
	slidingLogLua string
	//go:embed batch.lua
	batchLua string
	//go:embed multi.lua
	multiLua string
)

// luaScript is one of the store's scripts, with the leading arguments of
// its two commands boxed once (converting a string to any allocates).
type luaScript struct {
	source      string
	evalshaHead [2]any
	evalHead    [2]any
}

// newLuaScript is the script of the files parts, concatenated.
func newLuaScript(parts ...string) *luaScript {
	return luaScriptOf(strings.Join(parts, ""))
}

func luaScriptOf(src string) *luaScript {
	return &luaScript{
		source:      src,
		evalshaHead: [2]any{"evalsha", redis.NewScript(src).Hash()},
		evalHead:    [2]any{"eval", src},
	}
}

// scripts holds one script per algorithm family, indexed by
// limiter.Algorithm: common.lua, persist.lua for the window families, the
// family's file and batch.lua. Redis runs a script's top level on every
// call, so a script that defined all four families' functions would build
// them all on every call. Immutable after package initialisation.
var scripts = func() [limiter.SlidingCounter + 1]*luaScript {
	bucket := newLuaScript(commonLua, bucketLua, batchLua)
	return [...]*luaScript{
		limiter.TokenBucket:         bucket,
		limiter.LeakyBucketPolicing: bucket,
		limiter.LeakyBucketShaping:  bucket,
		limiter.FixedWindow:         newLuaScript(commonLua, persistLua, fixedWindowLua, batchLua),
		limiter.SlidingLog:          newLuaScript(commonLua, persistLua, slidingLogLua, batchLua),
		limiter.SlidingCounter:      newLuaScript(commonLua, persistLua, slidingCounterLua, batchLua),
	}
}()

// multiScript is TakeAll's script (see multi.lua): common.lua,
// persist.lua, every family's file in a block of its own that files its
// decide in the DECIDE table, and multi.lua. The blocks keep each family's locals (decide
// first of all) apart. Immutable after package initialisation.
var multiScript = func() *luaScript {
	var b strings.Builder
	b.WriteString(commonLua)
	b.WriteString(persistLua)
	b.WriteString("local DECIDE = {}\n")
	for _, f := range []struct{ name, src string }{
		{"bucket", bucketLua},
		{"fixed_window", fixedWindowLua},
		{"sliding_log", slidingLogLua},
		{"sliding_counter", slidingCounterLua},
	} {
		fmt.Fprintf(&b, "do\n%s\nDECIDE.%s = decide\nend\n", f.src, f.name)
	}
	b.WriteString(multiLua)
	return luaScriptOf(b.String())
}()

// maxArg caps costs sent to the script at 2^53, the last integer a Lua
// number holds exactly. A larger cost exceeds every capacity, and a larger
// refund empties every budget, so nothing is lost.
const maxArg = 1 << 53

// The script's reply is one string: a record per key of replyFields
// little-endian int64s, the first a status, then the messages of the keys
// of status statusError (see batch.lua). A string because Redis converts a
// reply to RESP per element, and go-redis decodes an array into one boxed
// value per element.
const (
	replyFields   = 6
	replySize     = 8 * replyFields
	statusOK      = 0
	statusExceeds = 1 // the cost can never fit
	statusError   = 2 // the second value is the length of Redis's error message
)

// The per-key arguments travel in one ARGV string, a record per key of
// recordFields little-endian int64s (see batch.lua), which the script reads
// with struct.unpack: Lua's tonumber goes through strtod, and six numbers
// parsed from text per key cost Redis more than the key's arithmetic.
const (
	recordFields = 6
	recordSize   = 8 * recordFields
	recordTake   = 0 // the op field of a Take
	recordRefund = 1 // the op field of a Refund
)

// call is one Take or Refund on its way through a round trip. The round
// trip sets d and err; with coalescing, the batcher's fields below carry it
// through the queue.
type call struct {
	key   string // the Redis key
	tag   string // its hash tag, which decides where it may be batched
	limit limiter.Limit
	op    string
	n     int64

	d   limiter.Decision
	err error

	// parts are a TakeAll's budgets, in its requests' order: the call is
	// then one script call of multi.lua over their keys, alone in its
	// chunk, and each part's d and err are its budget's outcome. The call's
	// own key, limit and n are unused, its d is zero.
	parts []*call

	// Owned by the batcher (guarded by its mutex until sent).
	state    callState
	done     chan struct{} // closed once d and err are set
	deadline time.Time     // the caller's, zero when it has none

	one [1]*call // backs single
}

// single returns a batch of c alone, without allocating one.
func (c *call) single() []*call {
	c.one[0] = c
	return c.one[:]
}

func (s *Store) newCall(identity string, l limiter.Limit, op string, n int64) *call {
	t := tag(identity)
	return &call{key: s.keyFor(t, l.Algorithm), tag: t, limit: l, op: op, n: n}
}

// script is the script that decides c.
func (c *call) script() *luaScript {
	if c.parts != nil {
		return multiScript
	}
	return scripts[c.limit.Algorithm]
}

// appendRecord appends c's record: op, algorithm, n, then a, b, c (see
// batch.lua).
func (c *call) appendRecord(rec []byte) []byte {
	l := c.limit
	var a, b, x int64
	if l.Algorithm.IsBucket() {
		bk, _ := l.Bucket() // valid: run checked l before making the call
		a, b, x = bk.Burst, bk.Unit, bk.Refill
	} else {
		a, b = l.Rate, int64(l.Period/time.Microsecond)
	}
	op := int64(recordTake)
	if c.op == opRefund {
		op = recordRefund
	}
	for _, v := range [recordFields]int64{op, int64(l.Algorithm), min(c.n, maxArg), a, b, x} {
		rec = binary.LittleEndian.AppendUint64(rec, uint64(v))
	}
	return rec
}

// wrap prefixes err with the package, the algorithm and the op.
func (c *call) wrap(err error) error {
	if c.parts != nil {
		return fmt.Errorf("redisstore: TakeAll: %w", err)
	}
	return fmt.Errorf("redisstore: %s %s: %w", c.limit.Algorithm, c.op, err)
}

// fail sets c's outcome to err, wrapped, with no decision.
func (c *call) fail(err error) {
	c.d, c.err = limiter.Decision{}, c.wrap(err)
	for _, p := range c.parts {
		p.d, p.err = limiter.Decision{}, nil
	}
}

// settleParts sets a TakeAll call's error from its parts' outcomes: the
// first part's error, naming the request.
func (c *call) settleParts() {
	c.err = nil
	for i, p := range c.parts {
		if p.err != nil {
			c.err = fmt.Errorf("redisstore: TakeAll request %d: %w", i, p.err)
			return
		}
	}
}

// decisions are the calls a chunk's script call decides, one per key: its
// calls, or the parts of its one TakeAll.
func (ch *chunk) decisions() []*call {
	if len(ch.calls) == 1 && ch.calls[0].parts != nil {
		return ch.calls[0].parts
	}
	return ch.calls
}

// settle sets c's outcome from its record of the script's reply; msg is
// its error message when the status is statusError.
func (c *call) settle(v *[replyFields]int64, msg string) {
	c.d = limiter.Decision{
		Allowed:    v[1] == 1,
		Limit:      c.limit.Capacity(),
		Remaining:  v[2],
		RetryAfter: time.Duration(v[3]) * time.Microsecond, // the script's µs, below 2^53
		ResetAfter: time.Duration(v[4]) * time.Microsecond,
		Delay:      time.Duration(v[5]) * time.Microsecond,
	}
	c.err = nil
	switch v[0] {
	case statusOK:
	case statusExceeds:
		c.err = limiter.ExceedsCapacity(c.n, c.limit.Capacity())
	case statusError:
		c.fail(scriptError(msg))
	default:
		c.fail(fmt.Errorf("malformed script reply: status %d", v[0]))
	}
}

// settleReply sets the outcome of each of units from the script's reply.
func settleReply(units []*call, reply string) error {
	n := len(units) * replySize
	if len(reply) < n {
		return fmt.Errorf("malformed script reply of %d bytes for %d keys", len(reply), len(units))
	}
	// The messages of status statusError follow the records: check that
	// their lengths add up before settling any call.
	msgs := reply[n:]
	total := 0
	for i := range units {
		rec := reply[i*replySize:]
		if le64(rec) == statusError {
			l := le64(rec[8:])
			if l > uint64(len(msgs)-total) {
				return fmt.Errorf("malformed script reply: error message of %d bytes past its end", l)
			}
			total += int(l)
		}
	}
	if total != len(msgs) {
		return fmt.Errorf("malformed script reply: %d bytes after the records, %d in messages", len(msgs), total)
	}
	var v [replyFields]int64
	for i, c := range units {
		rec := reply[i*replySize:]
		for j := range v {
			v[j] = int64(le64(rec[8*j:]))
		}
		var msg string
		if v[0] == statusError {
			msg, msgs = msgs[:v[1]], msgs[v[1]:]
		}
		c.settle(&v, msg)
	}
	return nil
}

// le64 is the little-endian uint64 s starts with, read from the string
// itself: converting to []byte would copy.
func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// scriptError is an error Redis raised inside the script for one key
// (WRONGTYPE, say). It is a redis.Error, like the errors go-redis returns.
type scriptError string

func (e scriptError) Error() string { return string(e) }

// RedisError marks scriptError as an error reported by Redis.
func (scriptError) RedisError() {}

var _ redis.Error = scriptError("")

// route is how a client's keys may share a script call.
type route uint8

const (
	// routeOne: one server holds every key (standalone, Sentinel).
	routeOne route = iota
	// routeSlot: keys of one Cluster hash slot share a call.
	routeSlot
	// routeTag: keys of one hash tag share a call. Every sharding scheme
	// that honours hash tags (Cluster, Ring) keeps them together.
	routeTag
)

func routeFor(c redis.Scripter) route {
	switch c.(type) {
	case *redis.Client:
		return routeOne
	case *redis.ClusterClient:
		return routeSlot
	}
	return routeTag
}

// processor is the part of a go-redis client (or pipeline) that sends a
// prepared command. The store sends its own commands, marked not to be
// retried (see noRetryCmd), through it when the client has it.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// pipeliner is a client that can pipeline: several script calls go in one
// round trip (per node, on a Cluster).
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

// noRetryCmd is an EVALSHA or EVAL that go-redis never sends a second time.
// go-redis retries a command after a network error or a read timeout
// (Options.MaxRetries); if the first attempt reached Redis, the script
// would run twice and debit twice. Redirections (MOVED, ASK) still happen:
// they mean the script did not run.
type noRetryCmd struct{ *redis.Cmd }

// NoRetry tells go-redis not to resend the command.
func (noRetryCmd) NoRetry() bool { return true }

// chunk is one script call: calls whose keys may share it, in order.
type chunk struct {
	calls []*call
	cmd   *redis.Cmd
}

// roundTrip decides calls in as few script calls as their keys allow, sent
// together (pipelined when there are several), and sets each call's d and
// err. Errors of the whole round trip are set on every call it carried.
func (s *Store) roundTrip(ctx context.Context, calls []*call) {
	chunks := s.split(calls)
	now := ""
	if s.clock != nil {
		now = strconv.FormatInt(s.clock.Now().UnixMicro(), 10)
	}
	s.send(ctx, chunks, now, false)
	// A server without the script in its cache (new, restarted, flushed)
	// answers NOSCRIPT without running it, so sending EVAL is safe.
	var missing []*chunk
	for _, ch := range chunks {
		if err := ch.cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			missing = append(missing, ch)
		}
	}
	if len(missing) > 0 {
		s.send(ctx, missing, now, true)
	}
	for _, ch := range chunks {
		reply, err := ch.cmd.Text()
		if err == nil {
			err = settleReply(ch.decisions(), reply)
		}
		if err != nil {
			for _, c := range ch.calls {
				c.fail(err)
			}
			continue
		}
		if c := ch.calls[0]; c.parts != nil {
			c.settleParts()
		}
	}
}

// split groups calls into script calls by route and by script, keeping
// their order within each group, at most MaxScriptKeys per call. A
// TakeAll is a script call of its own, sent after the others.
func (s *Store) split(calls []*call) []*chunk {
	if len(calls) == 1 { // a lone call: nothing to group
		return []*chunk{{calls: calls}}
	}
	var multi []*chunk
	for i, c := range calls {
		if c.parts == nil {
			continue
		}
		// Rare: move the TakeAlls out, keeping the order of the rest.
		rest := make([]*call, 0, len(calls))
		rest = append(rest, calls[:i]...)
		for _, c := range calls[i:] {
			if c.parts != nil {
				multi = append(multi, &chunk{calls: []*call{c}})
			} else {
				rest = append(rest, c)
			}
		}
		if len(rest) == 0 {
			return multi
		}
		calls = rest
		break
	}
	type slotScript struct {
		slot   uint16
		script *luaScript
	}
	type tagScript struct {
		tag    string
		script *luaScript
	}
	var groups [][]*call
	switch s.route {
	case routeOne:
		groups = group(calls, (*call).script)
	case routeSlot:
		groups = group(calls, func(c *call) slotScript { return slotScript{slot(c.tag), c.script()} })
	default:
		groups = group(calls, func(c *call) tagScript { return tagScript{c.tag, c.script()} })
	}
	var chunks []*chunk
	for _, g := range groups {
		for len(g) > 0 {
			n := min(len(g), MaxScriptKeys)
			chunks = append(chunks, &chunk{calls: g[:n:n]})
			g = g[n:]
		}
	}
	return append(chunks, multi...) // after the others: queued calls of one key keep their order
}

// group splits calls by key, in order of first appearance, keeping their
// order within each group.
func group[K comparable](calls []*call, key func(*call) K) [][]*call {
	index := make(map[K]int, len(calls))
	var groups [][]*call
	for _, c := range calls {
		k := key(c)
		i, ok := index[k]
		if !ok {
			i = len(groups)
			index[k] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], c)
	}
	return groups
}

// send runs one EVALSHA (or, with eval, EVAL) per chunk: one command alone,
// several in a pipeline. Each chunk's cmd holds its outcome.
func (s *Store) send(ctx context.Context, chunks []*chunk, now string, eval bool) {
	for _, ch := range chunks {
		ch.cmd = command(ctx, ch.calls[0].script(), ch.decisions(), now, s.margin, eval)
	}
	proc, ok := s.client.(processor)
	if !ok {
		// Not a go-redis client: go through the Scripter interface, one
		// call at a time, with whatever retries it makes.
		for _, ch := range chunks {
			ch.cmd = s.viaScripter(ctx, ch.cmd, eval)
		}
		return
	}
	if p, ok := s.client.(pipeliner); ok && len(chunks) > 1 {
		pipe := p.Pipeline()
		for _, ch := range chunks {
			_ = pipe.Process(ctx, noRetryCmd{ch.cmd})
		}
		// Exec's error is also every failed command's own.
		_, _ = pipe.Exec(ctx)
		return
	}
	for _, ch := range chunks {
		_ = proc.Process(ctx, noRetryCmd{ch.cmd})
	}
}

// command builds the EVALSHA (or EVAL) of sc over calls, one key each.
func command(ctx context.Context, sc *luaScript, calls []*call, now string, margin any, eval bool) *redis.Cmd {
	args := make([]any, 0, 3+len(calls)+3)
	if eval {
		args = append(args, sc.evalHead[:]...)
	} else {
		args = append(args, sc.evalshaHead[:]...)
	}
	args = append(args, len(calls))
	for _, c := range calls {
		args = append(args, c.key)
	}
	rec := make([]byte, 0, recordSize*len(calls))
	for _, c := range calls {
		rec = c.appendRecord(rec)
	}
	args = append(args, now, margin, rec)
	return redis.NewCmd(ctx, args...)
}

// viaScripter replays cmd's arguments through the redis.Scripter methods.
func (s *Store) viaScripter(ctx context.Context, cmd *redis.Cmd, eval bool) *redis.Cmd {
	args := cmd.Args()
	n := args[2].(int)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = args[3+i].(string)
	}
	if eval {
		return s.client.Eval(ctx, args[1].(string), keys, args[3+n:]...)
	}
	return s.client.EvalSha(ctx, args[1].(string), keys, args[3+n:]...)
}
