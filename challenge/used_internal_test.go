package challenge

import "testing"

func TestDefaultMaxUsed(t *testing.T) {
	p, err := NewPoW(Config{Secret: make([]byte, MinSecretLen)})
	if err != nil {
		t.Fatal(err)
	}
	if p.used.limit != 1_000_000 || DefaultMaxUsed != 1_000_000 {
		t.Fatalf("default MaxUsed = %d, want 1,000,000", p.used.limit)
	}
	// Default TTL + MaxSkew (65 s) over 64 generations.
	if p.used.width != 1016 {
		t.Fatalf("generation width = %d ms, want 1016", p.used.width)
	}
}

func TestUsedSet(t *testing.T) {
	var u usedSet
	u.init(4, 640) // generations of 10 ms
	key := func(b byte) usedKey { return usedKey{b} }
	steps := []struct {
		name          string
		key           byte
		expires, now  int64
		want          error
		wantN, wantGs int
	}{
		{"first", 1, 105, 0, nil, 1, 1},
		{"same generation", 2, 109, 0, nil, 2, 1},
		{"replay", 1, 105, 1, ErrReplayed, 2, 1},
		{"new generation", 3, 110, 2, nil, 3, 2},
		{"older generation", 4, 95, 3, nil, 4, 3},
		{"full, nothing expired", 5, 120, 4, ErrFull, 4, 3},
		{"full, oldest generation not over", 5, 120, 98, ErrFull, 4, 3},
		{"oldest generation over at its last ms", 5, 120, 99, nil, 4, 3},
		{"replay of a held key when full", 3, 110, 99, ErrReplayed, 4, 3},
		{"all over: a new generation sweeps", 6, 700, 200, nil, 1, 1},
	}
	for _, s := range steps {
		if err := u.add(key(s.key), s.expires, s.now); err != s.want {
			t.Fatalf("%s: add = %v, want %v", s.name, err, s.want)
		}
		if u.n != s.wantN || len(u.gens) != s.wantGs {
			t.Fatalf("%s: %d keys in %d generations, want %d in %d", s.name, u.n, len(u.gens), s.wantN, s.wantGs)
		}
	}
}
