package fileread

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A named pipe, a device and a directory are refused at once, saying what
// they are (a pipe's open would wait for a writer; /dev/zero never ends);
// a file over the bound is refused with the bound; a regular file, also
// through a symbolic link, is read whole.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "rules.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		max  int64
		want string // "" for a read
	}{
		{fifo, 1 << 20, "not a regular file: it is a named pipe"},
		{"/dev/zero", 1 << 20, "not a regular file: it is a device"},
		{dir, 1 << 20, "not a regular file: it is a directory"},
		{filepath.Join(dir, "none"), 1 << 20, "no such file or directory"},
		{file, 9, "file is larger than 9 bytes"},
		{file, 10, ""},
		{link, 2 << 10, ""},
	} {
		done := make(chan struct{})
		var data []byte
		var err error
		go func() {
			defer close(done)
			data, err = Read(c.path, c.max)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("Read(%s) still waits after 5s", c.path)
		}
		switch {
		case c.want == "" && (err != nil || string(data) != "0123456789"):
			t.Errorf("Read(%s, %d) = %q, %v; want the file's contents", c.path, c.max, data, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("Read(%s, %d): %v, want an error saying %q", c.path, c.max, err, c.want)
		case strings.Contains(c.want, "regular") && !errors.Is(err, ErrNotRegular):
			t.Errorf("Read(%s): %v is not ErrNotRegular", c.path, err)
		}
	}
	if got := size(16 << 20); got != "16 MiB" {
		t.Errorf("size(16 MiB) = %q", got)
	}
}
