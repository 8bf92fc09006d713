// Package term says whether output goes to a terminal, for the progress
// bars of floodgate sim and floodgate bench (their "auto" mode).
package term

import (
	"io"
	"os"
)

// IsTerminal reports whether w is a terminal: an *os.File on a character
// device. A pipe, a regular file or any other writer is not.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
