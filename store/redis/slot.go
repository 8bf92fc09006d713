package redis

import "strings"

// slotCount is the number of hash slots of a Redis Cluster.
const slotCount = 16384

// crcTable is CRC-16/XMODEM (polynomial 0x1021), the checksum Redis
// Cluster hashes keys with.
var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for j := 0; j < 8; j++ {
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

// Slot returns the Redis Cluster hash slot of key: CRC16 of the key, or of
// its hash tag (the part between the first '{' and the next '}', when not
// empty), modulo 16384. Keys that share a hash tag share a slot, and a Take
// over keys of one slot is decided by one script call even on a Cluster.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^key[i]]
	}
	return int(crc) % slotCount
}
