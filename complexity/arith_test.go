package complexity

import (
	"math"
	"testing"
)

func TestSaturatingArithmetic(t *testing.T) {
	const maxInt = math.MaxInt64
	adds := []struct{ a, b, want Cost }{
		{1, 2, 3},
		{CostCeiling, 1, CostCeiling},
		{CostCeiling, CostCeiling, CostCeiling},
		{costFloor, -1, costFloor},
		{costFloor, costFloor, costFloor},
		{-1 << 62, -1 << 62, costFloor}, // exactly MinInt64: below the floor
		{CostCeiling, costFloor, 0},
		{CostCeiling, -5, CostCeiling - 5},
	}
	for _, tt := range adds {
		if got := addCost(tt.a, tt.b); got != tt.want {
			t.Errorf("addCost(%d, %d) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
	muls := []struct {
		c    Cost
		n    int64
		want Cost
	}{
		{2500, 4, 10000},
		{CostCeiling / 2, 3, CostCeiling},
		{-CostCeiling / 2, 3, costFloor},
		{1, maxInt, maxInt},
		{5, 0, 0},
		{5, -1, 0}, // sizes are never negative; treated as empty
	}
	for _, tt := range muls {
		if got := mulCost(tt.c, tt.n); got != tt.want {
			t.Errorf("mulCost(%d, %d) = %d, want %d", tt.c, tt.n, got, tt.want)
		}
	}
	if addCount(maxInt, 1) != maxInt || mulCount(maxInt/2, 3) != maxInt || mulCount(0, maxInt) != 0 || mulCount(6, 7) != 42 {
		t.Error("count arithmetic does not saturate")
	}
}
