package challenge

import "sync"

// usedKeyLen is how many bytes of a token's MAC identify it in the used
// set: 128 bits, so two tokens collide with negligible probability, and no
// client can aim for a collision without the secret.
const usedKeyLen = 16

type usedKey [usedKeyLen]byte

// generations is how many generations the validity window of a token is
// split into. A generation is dropped whole once every token in it has
// expired, so a token is remembered at most window/generations past its
// expiry, and the set's memory is given back to the runtime (a Go map never
// shrinks, so deleting keys one by one would not).
const generations = 64

// usedSet remembers the accepted tokens until they expire, to accept each
// once. Tokens are grouped into generations by expiry time: generation g
// holds the tokens expiring in [g·width, (g+1)·width) ms. A token's
// generation follows from its expiry, so a lookup reads one map, and at
// most generations+2 generations hold tokens that have not expired.
//
// When it holds limit tokens it refuses new ones (ErrFull) rather than forget
// one that has not expired: forgetting would let that token be replayed.
type usedSet struct {
	mu     sync.Mutex
	width  int64 // ms per generation, at least 1
	limit  int
	n      int // tokens held across gens
	gens   map[int64]map[usedKey]struct{}
	oldest int64 // lowest generation in gens; meaningless when gens is empty
}

// init sizes the set for limit tokens whose expiries lie within windowMS of
// the time they are added.
func (u *usedSet) init(limit int, windowMS int64) {
	u.limit = limit
	u.width = max(1, (windowMS+generations-1)/generations)
	u.gens = make(map[int64]map[usedKey]struct{})
}

func (u *usedSet) len() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.n
}

// add records key, a token expiring at expiresMS (ms since the Unix epoch,
// after nowMS), as used. It returns ErrReplayed when key is already held
// and ErrFull when limit unexpired tokens are held.
func (u *usedSet) add(key usedKey, expiresMS, nowMS int64) error {
	g := expiresMS / u.width
	u.mu.Lock()
	defer u.mu.Unlock()
	gen := u.gens[g]
	if _, dup := gen[key]; dup {
		return ErrReplayed
	}
	if gen == nil || u.n >= u.limit {
		u.sweep(nowMS)
		if u.n >= u.limit {
			return ErrFull
		}
		if gen == nil {
			gen = make(map[usedKey]struct{})
			u.gens[g] = gen
			if len(u.gens) == 1 || g < u.oldest {
				u.oldest = g
			}
		}
	}
	gen[key] = struct{}{}
	u.n++
	return nil
}

// sweep drops the generations whose tokens have all expired at nowMS. It
// returns at once when the oldest generation has not, so a full set
// refuses in constant time.
func (u *usedSet) sweep(nowMS int64) {
	if len(u.gens) == 0 || !u.expired(u.oldest, nowMS) {
		return
	}
	first := true
	for g, gen := range u.gens {
		if u.expired(g, nowMS) {
			u.n -= len(gen)
			delete(u.gens, g)
			continue
		}
		if first || g < u.oldest {
			u.oldest, first = g, false
		}
	}
}

// expired reports whether every token of generation g has expired at
// nowMS: a token expiring at e is refused from e on, and g's last expiry
// is (g+1)·width − 1.
func (u *usedSet) expired(g, nowMS int64) bool {
	return (g+1)*u.width-1 <= nowMS
}
