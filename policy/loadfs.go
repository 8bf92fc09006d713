package policy

import (
	"fmt"
	"io/fs"
	"sort"
	"strings"
)

// LoadFS is Load over a file system, such as an embedded copy of a
// configuration directory: every *.yaml and *.yml file in fsys, in name
// order, recursively. Problems name files relative to fsys, after prefix.
func LoadFS(fsys fs.FS, prefix string) (*Config, error) {
	var srcs []source
	var probs Problems
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		name := prefix + p
		switch {
		case err != nil:
			probs = append(probs, Problem{File: name, Message: fmt.Sprintf("cannot read: %v", err)})
			return nil
		case p != "." && strings.HasPrefix(d.Name(), "."):
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		case d.IsDir():
			return nil
		}
		if ext := strings.ToLower(p[strings.LastIndexByte(p, '.')+1:]); ext != "yaml" && ext != "yml" {
			return nil
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			probs = append(probs, Problem{File: name, Message: err.Error()})
			return nil
		}
		srcs = append(srcs, source{name, data})
		return nil
	})
	if err != nil {
		probs = append(probs, Problem{File: prefix, Message: err.Error()})
	}
	if len(probs) > 0 {
		return nil, probs
	}
	sort.Slice(srcs, func(i, j int) bool { return srcs[i].name < srcs[j].name })
	return build(srcs)
}
