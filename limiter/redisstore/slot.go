package redisstore

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// crcTable holds CRC-16/XMODEM (polynomial 0x1021, initial value 0, no
// reflection), the checksum Redis Cluster hashes keys with, for each byte.
var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// slot is the Cluster hash slot of every key whose hash tag is t. Redis
// hashes only the tag when a key has a non-empty one, and every key the
// store writes has (see tag): the slot follows from the tag alone.
func slot(t string) uint16 {
	var c uint16
	for i := 0; i < len(t); i++ {
		c = c<<8 ^ crcTable[byte(c>>8)^t[i]]
	}
	return c % clusterSlots
}
