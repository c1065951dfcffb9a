package challenge_test

import "crypto/sha256"

func sha256Sum(s string) [sha256.Size]byte { return sha256.Sum256([]byte(s)) }
