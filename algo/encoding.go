package algo

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// stateVersion leads every encoded State so the layout can change.
const stateVersion = 1

// AppendBinary appends a compact encoding of s to b (varints), for stores
// that keep state as opaque bytes, such as Memcached.
func (s *State) AppendBinary(b []byte) ([]byte, error) {
	b = append(b, stateVersion)
	b = binary.AppendVarint(b, s.A)
	b = binary.AppendVarint(b, s.B)
	b = binary.AppendVarint(b, s.C)
	b = binary.AppendUvarint(b, uint64(len(s.Ext)))
	for _, v := range s.Ext {
		b = binary.AppendVarint(b, v)
	}
	return b, nil
}

// MarshalBinary encodes s; see AppendBinary.
func (s *State) MarshalBinary() ([]byte, error) { return s.AppendBinary(nil) }

// ErrBadState is returned when encoded state cannot be decoded.
var ErrBadState = errors.New("algo: malformed state encoding")

// UnmarshalBinary decodes what MarshalBinary produced, reusing s.Ext's
// storage.
func (s *State) UnmarshalBinary(b []byte) error {
	if len(b) == 0 || b[0] != stateVersion {
		return fmt.Errorf("%w: unknown version", ErrBadState)
	}
	b = b[1:]
	next := func() (int64, bool) {
		v, n := binary.Varint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	var ok [3]bool
	s.A, ok[0] = next()
	s.B, ok[1] = next()
	s.C, ok[2] = next()
	if !ok[0] || !ok[1] || !ok[2] {
		return fmt.Errorf("%w: truncated header", ErrBadState)
	}
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return fmt.Errorf("%w: bad length", ErrBadState)
	}
	b = b[k:]
	s.Ext = s.Ext[:0]
	for i := uint64(0); i < n; i++ {
		v, good := next()
		if !good {
			return fmt.Errorf("%w: truncated entries", ErrBadState)
		}
		s.Ext = append(s.Ext, v)
	}
	if len(b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrBadState, len(b))
	}
	if n == 0 {
		s.Ext = nil
	}
	return nil
}
