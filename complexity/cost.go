package complexity

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"
)

// Cost is an amount of query cost in fixed point: thousandths of a point.
//
// Weights such as "2.0", "0.25" or "-12.0" are exact at this scale, so the
// same query always prices to the same value and never accumulates binary
// floating-point error (ten fields of weight 0.1 cost exactly 1). Weights
// with finer digits are rounded up to the next thousandth.
//
// All arithmetic on costs saturates at ±CostCeiling instead of wrapping.
type Cost int64

const (
	// CostScale is the number of Cost units in one point.
	CostScale = 1000

	// CostCeiling is the largest Cost: about 9.2 × 10^15 points. A
	// computation that would exceed it stays at it.
	CostCeiling Cost = math.MaxInt64
	costFloor   Cost = -math.MaxInt64
)

// Points returns the cost in whole points, rounded up: the amount a budget
// should debit. It is never negative.
func (c Cost) Points() int64 {
	if c <= 0 {
		return 0
	}
	p := int64(c) / CostScale
	if int64(c)%CostScale != 0 {
		p++
	}
	return p
}

// Float64 returns the cost in points.
func (c Cost) Float64() float64 {
	return float64(c) / CostScale
}

// String formats the cost in points as an exact decimal: "5101", "2.5".
func (c Cost) String() string {
	neg := c < 0
	u := uint64(c)
	if neg {
		u = uint64(-c) // c ≥ costFloor, so -c cannot overflow
	}
	whole, frac := u/CostScale, u%CostScale
	s := strconv.FormatUint(whole, 10)
	if frac != 0 {
		f := fmt.Sprintf("%03d", frac)
		s += "." + strings.TrimRight(f, "0")
	}
	if neg {
		s = "-" + s
	}
	return s
}

// MarshalJSON writes the cost in points as an exact JSON number.
func (c Cost) MarshalJSON() ([]byte, error) {
	return []byte(c.String()), nil
}

// UnmarshalJSON reads a JSON number of points (see ParseCost).
func (c *Cost) UnmarshalJSON(b []byte) error {
	v, err := ParseCost(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// ErrInvalidCost is returned (wrapped) by ParseCost for text that is not a
// decimal number.
var ErrInvalidCost = errors.New("complexity: invalid cost")

// ParseCost parses a decimal number of points, as written in a @cost weight:
// "2", "2.0", "-12.5", "1e3". Digits finer than a thousandth round up;
// values beyond ±CostCeiling saturate.
func ParseCost(s string) (Cost, error) {
	c, problem := parseCost(s)
	if problem != "" {
		return 0, fmt.Errorf("%w: %q %s", ErrInvalidCost, s, problem)
	}
	return c, nil
}

// parseCost returns the cost, or why s is not one.
func parseCost(s string) (Cost, string) {
	t := strings.TrimSpace(s)
	if !decimalPattern.MatchString(t) {
		return 0, "is not a decimal number"
	}
	if len(t) > 64 {
		return 0, "is longer than 64 characters"
	}
	if i := strings.IndexAny(t, "eE"); i >= 0 {
		// Bounds the work big.Rat does on input such as "1e999999999".
		if exp, err := strconv.Atoi(t[i+1:]); err != nil || exp > 64 || exp < -64 {
			return 0, "has an exponent outside ±64"
		}
	}
	r, ok := new(big.Rat).SetString(t)
	if !ok {
		return 0, "is not a decimal number"
	}
	return costFromRat(r), ""
}

// decimalPattern is the syntax ParseCost accepts: a GraphQL Int or Float
// literal, optionally with a leading '+' or a bare fraction such as ".5".
var decimalPattern = regexp.MustCompile(`^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$`)

// costFromFloat converts a finite point value to Cost, rounding up.
func costFromFloat(f float64) Cost {
	return costFromRat(new(big.Rat).SetFloat64(f))
}

func costFromRat(r *big.Rat) Cost {
	r = new(big.Rat).Mul(r, big.NewRat(CostScale, 1))
	// Ceiling division: round toward +∞ so a weight is never under-priced.
	q, m := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if m.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	switch {
	case q.Cmp(big.NewInt(int64(CostCeiling))) > 0:
		return CostCeiling
	case q.Cmp(big.NewInt(int64(costFloor))) < 0:
		return costFloor
	}
	return Cost(q.Int64())
}

// addCost returns a+b, saturating at ±CostCeiling.
func addCost(a, b Cost) Cost {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0: // wrapped past MaxInt64
		return CostCeiling
	case a < 0 && b < 0 && (s >= 0 || s < costFloor): // wrapped, or reached MinInt64
		return costFloor
	}
	return s
}

// mulCost returns c×n for a list size n ≥ 0, saturating at ±CostCeiling.
func mulCost(c Cost, n int64) Cost {
	if c == 0 || n == 0 {
		return 0
	}
	if n < 0 {
		// Sizes are validated non-negative; treat anything else as empty.
		return 0
	}
	if c > 0 {
		if int64(c) > int64(CostCeiling)/n {
			return CostCeiling
		}
		return c * Cost(n)
	}
	if int64(c) < int64(costFloor)/n {
		return costFloor
	}
	return c * Cost(n)
}

// clampZero returns max(0, c).
func clampZero(c Cost) Cost {
	if c < 0 {
		return 0
	}
	return c
}

// addCount returns a+b for non-negative counts, saturating at MaxInt64.
func addCount(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// mulCount returns a×b for non-negative counts, saturating at MaxInt64.
func mulCount(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}
