// Package fileread reads the files an operator names (configuration,
// tokens, certificates) so that a wrong path cannot hang or exhaust the
// process: only a regular file is opened (a named pipe would block the
// open until a writer came, a device like /dev/zero never end), and no
// more than a bound is read.
package fileread

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// ErrNotRegular is the error of a path that names no regular file.
var ErrNotRegular = errors.New("not a regular file")

// Read returns the contents of the regular file at path (a symbolic link
// to one is followed), at most max bytes: a larger file is an error
// saying its bound. Errors do not repeat path; the caller names it.
func Read(path string, max int64) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, unwrapPath(err)
	}
	if err := regular(info); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, unwrapPath(err)
	}
	defer f.Close()
	// Checked again on the file opened: the path may have been swapped.
	if info, err := f.Stat(); err != nil {
		return nil, unwrapPath(err)
	} else if err := regular(info); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, unwrapPath(err)
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("file is larger than %s", size(max))
	}
	return data, nil
}

// regular returns ErrNotRegular, saying what info is instead, unless it
// is a regular file.
func regular(info fs.FileInfo) error {
	m := info.Mode()
	var what string
	switch {
	case m.IsRegular():
		return nil
	case m.IsDir():
		what = "a directory"
	case m&fs.ModeNamedPipe != 0:
		what = "a named pipe"
	case m&fs.ModeSocket != 0:
		what = "a socket"
	case m&fs.ModeDevice != 0:
		what = "a device"
	default:
		what = "of mode " + m.Type().String()
	}
	return fmt.Errorf("%w: it is %s", ErrNotRegular, what)
}

func size(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	if n >= 1<<10 && n%(1<<10) == 0 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
