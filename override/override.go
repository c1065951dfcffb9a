// Package override keeps per-principal overrides: a principal's plan, or
// some of its limits (burst, rate, per, quota, concurrency), replaced at
// run time, optionally until a time.
//
// An Override is a value; Validate checks its shape. A Store keeps the
// overrides of every principal (Memory: this process; package
// override/redisoverride: every process sharing one Redis) with a version
// that moves on every change. A Watcher keeps a local Snapshot that the
// request path reads without a store round trip, refreshed by polling the
// store's version (every DefaultPollInterval), so that every process
// applies a change within a second. What an override does to a principal's
// budgets is the budget engine's (budget.Policy.Override); this package
// knows nothing of plans.
package override

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/costguard/costguard/internal/kept"
)

// Errors a caller can act on.
var (
	// ErrInvalid wraps every error Validate and the JSON decoding return.
	ErrInvalid = errors.New("override: invalid override")
	// ErrFull: the store holds MaxOverrides overrides already and the
	// principal has none.
	ErrFull = errors.New("override: too many overrides")
	// ErrInvalidPrincipal: a principal key none of the identity forms.
	ErrInvalidPrincipal = errors.New("override: invalid principal")
)

// DefaultMaxOverrides is how many principals may have an override at once,
// by default: every process holds them all in memory (about 300 bytes each,
// so the default is a few MB at most).
const DefaultMaxOverrides = 10_000

// MaxKeyBytes is the longest principal key an override may name: the
// bound of a principal's key everywhere (the middleware shortens a longer
// one to its prefix and its hash).
const MaxKeyBytes = kept.MaxKey

// Quota replaces a plan's quota: Limit points per window of Per. Per 0
// keeps the plan's window (the plan must then have a quota).
type Quota struct {
	Limit int64
	Per   time.Duration
}

// Override replaces a principal's plan, or some of its limits, until Until
// (zero: until it is deleted). Plan and the limits combine: the limits
// given replace those of Plan (or, without Plan, of the principal's own
// plan); a zero limit keeps the plan's.
type Override struct {
	// Plan is the plan the principal is served by instead of its own.
	Plan string
	// Burst, Rate and Per replace the plan's bucket's.
	Burst int64
	Rate  int64
	Per   time.Duration
	// Quota replaces the plan's quota (nil: the plan's).
	Quota *Quota
	// Concurrency replaces the plan's cap on requests in flight (nil: the
	// plan's): a positive cap, or 0 for none.
	Concurrency *int
	// Until is when the override stops applying (zero: never). An expired
	// override applies to no request from that instant, and is removed
	// from the store at the next change or poll.
	Until time.Time
}

// Limited reports whether o replaces any limit (not only the plan).
func (o Override) Limited() bool {
	return o.Burst != 0 || o.Rate != 0 || o.Per != 0 || o.Quota != nil || o.Concurrency != nil
}

// Expired reports whether o has stopped applying at now.
func (o Override) Expired(now time.Time) bool { return !o.Until.IsZero() && !now.Before(o.Until) }

// Validate checks o's shape: it names a plan or a limit, no limit is
// negative (nor zero where given: a zero Concurrency lifts the cap), a
// quota's limit is at least a burst given with it, and Until, when set, is
// after now. Whether the plan exists and the limits fit the plans is the
// budget engine's to say.
func (o Override) Validate(now time.Time) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
	}
	if o.Plan == "" && !o.Limited() {
		return bad(`name a plan ("plan") or a limit ("burst", "rate", "per", "quota", "concurrency")`)
	}
	if o.Plan != "" && !printable(o.Plan) {
		return bad("plan %q must be printable ASCII", o.Plan)
	}
	switch {
	case o.Burst < 0:
		return bad("burst %d is negative", o.Burst)
	case o.Rate < 0:
		return bad("rate %d is negative", o.Rate)
	case o.Per < 0:
		return bad("per %v is negative", o.Per)
	case o.Per != 0 && o.Per < time.Microsecond:
		return bad("per %v is below a microsecond", o.Per)
	}
	if q := o.Quota; q != nil {
		switch {
		case q.Limit <= 0:
			return bad("quota limit %d must be positive", q.Limit)
		case q.Per < 0:
			return bad("quota per %v is negative", q.Per)
		case o.Burst > 0 && q.Limit < o.Burst:
			return bad("quota limit %d is below the burst %d, which could then never be spent", q.Limit, o.Burst)
		}
	}
	if c := o.Concurrency; c != nil && *c < 0 {
		return bad("concurrency %d is negative (0 lifts the cap)", *c)
	}
	if !o.Until.IsZero() && !o.Until.After(now) {
		return bad("until %s is not in the future", o.Until.UTC().Format(time.RFC3339))
	}
	return nil
}

// String is o's canonical form without Until, the same for the same
// override in every process: "plan=pro", "burst=20000 rate=20000 per=1h0m0s",
// "plan=pro quota=100000/24h0m0s concurrency=4". Decision events carry it.
func (o Override) String() string {
	var parts []string
	if o.Plan != "" {
		parts = append(parts, "plan="+o.Plan)
	}
	if o.Burst != 0 {
		parts = append(parts, "burst="+strconv.FormatInt(o.Burst, 10))
	}
	if o.Rate != 0 {
		parts = append(parts, "rate="+strconv.FormatInt(o.Rate, 10))
	}
	if o.Per != 0 {
		parts = append(parts, "per="+o.Per.String())
	}
	if q := o.Quota; q != nil {
		s := "quota=" + strconv.FormatInt(q.Limit, 10)
		if q.Per != 0 {
			s += "/" + q.Per.String()
		}
		parts = append(parts, s)
	}
	if c := o.Concurrency; c != nil {
		parts = append(parts, "concurrency="+strconv.Itoa(*c))
	}
	return strings.Join(parts, " ")
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return s != ""
}

// wire is an Override's JSON: durations as Go duration strings ("1h"),
// Until in RFC 3339, the quota as a number (its limit, in the plan's
// window) or an object {"limit", "per"}.
type wire struct {
	Plan        string          `json:"plan,omitempty"`
	Burst       int64           `json:"burst,omitempty"`
	Rate        int64           `json:"rate,omitempty"`
	Per         string          `json:"per,omitempty"`
	Quota       json.RawMessage `json:"quota,omitempty"`
	Concurrency *int            `json:"concurrency,omitempty"`
	Until       string          `json:"until,omitempty"`
}

type wireQuota struct {
	Limit int64  `json:"limit"`
	Per   string `json:"per,omitempty"`
}

// MarshalJSON writes o as the admin API shows it:
// {"plan":"pro","until":"2026-12-31T00:00:00Z"}, {"burst":20000,"rate":20000,"per":"1h0m0s"}.
func (o Override) MarshalJSON() ([]byte, error) {
	w := wire{Plan: o.Plan, Burst: o.Burst, Rate: o.Rate, Concurrency: o.Concurrency}
	if o.Per != 0 {
		w.Per = o.Per.String()
	}
	if q := o.Quota; q != nil {
		wq := wireQuota{Limit: q.Limit}
		if q.Per != 0 {
			wq.Per = q.Per.String()
		}
		w.Quota, _ = json.Marshal(wq)
	}
	if !o.Until.IsZero() {
		w.Until = o.Until.UTC().Format(time.RFC3339Nano)
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads an Override from the JSON MarshalJSON writes,
// refusing unknown members, a malformed duration or time, and trailing
// data, with errors wrapping ErrInvalid that name the member. It does
// not Validate.
func (o *Override) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var w wire
	if err := dec.Decode(&w); err != nil {
		return fmt.Errorf("%w: %s", ErrInvalid, jsonProblem(err))
	}
	if dec.More() {
		return fmt.Errorf("%w: more than one JSON value", ErrInvalid)
	}
	out := Override{Plan: w.Plan, Burst: w.Burst, Rate: w.Rate, Concurrency: w.Concurrency}
	var err error
	if w.Per != "" {
		if out.Per, err = time.ParseDuration(w.Per); err != nil {
			return fmt.Errorf(`%w: "per": %q is not a duration such as "1h" or "30m"`, ErrInvalid, w.Per)
		}
	}
	if len(w.Quota) > 0 && string(w.Quota) != "null" {
		q := &Quota{}
		if w.Quota[0] == '{' {
			var wq wireQuota
			qd := json.NewDecoder(bytes.NewReader(w.Quota))
			qd.DisallowUnknownFields()
			if err := qd.Decode(&wq); err != nil {
				return fmt.Errorf(`%w: "quota": %s`, ErrInvalid, jsonProblem(err))
			}
			q.Limit = wq.Limit
			if wq.Per != "" {
				if q.Per, err = time.ParseDuration(wq.Per); err != nil {
					return fmt.Errorf(`%w: "quota": "per": %q is not a duration such as "24h"`, ErrInvalid, wq.Per)
				}
			}
		} else if err := json.Unmarshal(w.Quota, &q.Limit); err != nil {
			return fmt.Errorf(`%w: "quota" must be a whole number of points or {"limit": N, "per": "24h"}`, ErrInvalid)
		}
		out.Quota = q
	}
	if w.Until != "" {
		if out.Until, err = time.Parse(time.RFC3339Nano, w.Until); err != nil {
			return fmt.Errorf(`%w: "until": %q is not an RFC 3339 time such as "2026-12-31T23:59:59Z"`, ErrInvalid, w.Until)
		}
	}
	*o = out
	return nil
}

// jsonProblem describes a decoding error without echoing the input.
func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te) && te.Field == "":
		return "the body is not a JSON object of an override"
	case errors.As(err, &te):
		return fmt.Sprintf("%q must be a %s", te.Field, kindOf(te.Type.Kind().String()))
	case errors.As(err, &se):
		return "the body is not valid JSON"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return "unknown member " + strings.TrimPrefix(err.Error(), "json: unknown field ") +
			`; the members are "plan", "burst", "rate", "per", "quota", "concurrency" and "until"`
	case errors.Is(err, io.EOF):
		return "the body is empty"
	}
	return "the body is not a JSON object of an override"
}

func kindOf(k string) string {
	switch k {
	case "int", "int64":
		return "whole number"
	}
	return k
}

// Parse reads an Override from JSON (as UnmarshalJSON, with the same
// errors for input that is not JSON at all) and does not Validate it.
func Parse(b []byte) (Override, error) {
	var o Override
	if !json.Valid(b) {
		dec := json.NewDecoder(bytes.NewReader(b))
		var v any
		if err := dec.Decode(&v); err == nil {
			return o, fmt.Errorf("%w: more than one JSON value", ErrInvalid)
		}
		return o, fmt.Errorf("%w: the body is not valid JSON", ErrInvalid)
	}
	err := o.UnmarshalJSON(b)
	return o, err
}

// Principal turns what an operator names a principal by into its key, the
// Identity.Key the budgets are keyed by: "user:<principal>",
// "key:<64 lowercase hex digits>" (an API key's SHA-256) and
// "ip:<address>" are kept as they are; anything else is a user's
// principal name, "user:" and the name. The key must be printable ASCII of
// at most MaxKeyBytes.
func Principal(name string) (string, error) {
	key := name
	switch {
	case strings.HasPrefix(name, "user:"):
		if len(name) == len("user:") {
			return "", fmt.Errorf("%w: %q names no user", ErrInvalidPrincipal, name)
		}
	case strings.HasPrefix(name, "key:"):
		h := name[len("key:"):]
		if len(h) != 64 || strings.Trim(h, "0123456789abcdef") != "" {
			return "", fmt.Errorf("%w: %q: an API key's principal is \"key:\" and the key's SHA-256 in 64 lowercase hex digits", ErrInvalidPrincipal, name)
		}
	case strings.HasPrefix(name, "ip:"):
		if _, err := netip.ParsePrefix(name[len("ip:"):]); err != nil {
			if _, err := netip.ParseAddr(name[len("ip:"):]); err != nil {
				return "", fmt.Errorf("%w: %q is not \"ip:\" and an address", ErrInvalidPrincipal, name)
			}
		}
	case name == "":
		return "", fmt.Errorf("%w: no principal named", ErrInvalidPrincipal)
	default:
		key = "user:" + name
	}
	if len(key) > MaxKeyBytes || !printable(key) {
		return "", fmt.Errorf("%w: a principal must be printable ASCII of at most %d bytes", ErrInvalidPrincipal, MaxKeyBytes)
	}
	return strings.Clone(key), nil // a name cut from a request's path must not keep the request alive where the key is stored
}
