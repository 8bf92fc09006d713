package policy

import (
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// LoadFS is Load over a file system, such as an embedded copy of a
// configuration directory: every *.yaml and *.yml file in fsys, in name
// order, recursively. Problems name files relative to fsys, after prefix.
// A file system that holds files but none of them YAML is an error, as a
// directory is for Load (see unreadRuleFiles); a file that is not YAML
// beside YAML ones is a warning, as for Load (see withSkipped).
func LoadFS(fsys fs.FS, prefix string) (*Config, error) {
	var srcs []source
	var probs Problems
	var skipped []string
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
		if !isRuleFile(p) {
			if isFile(d, func() (fs.FileInfo, error) { return fs.Stat(fsys, p) }) {
				skipped = append(skipped, name)
			}
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
	if p, ok := unreadRuleFiles(prefix, srcs, skipped); ok {
		probs = append(probs, p)
	}
	if len(probs) > 0 {
		return nil, probs
	}
	sort.Slice(srcs, func(i, j int) bool { return srcs[i].name < srcs[j].name })
	cfg, warns, err := build(srcs)
	withSkipped(prefix, cfg, warns, skipped)
	return cfg, err
}

// withSkipped adds to warns, and to cfg's warnings when cfg is not nil,
// one warning per file of skipped (the files of the configuration
// directory dir that are not hidden and not read as rules), up to
// maxSkippedNames and one for the rest, and returns warns sorted. Such a
// file beside YAML ones was skipped without a word: a Kubernetes
// ConfigMap's second key named config, which envoyproxy/ratelimit reads,
// lost its limits silently. (With no YAML file at all, unreadRuleFiles
// makes it an error.) The files quietlySkipped names are not warned of.
func withSkipped(dir string, cfg *Config, warns Problems, skipped []string) Problems {
	skipped = slices.DeleteFunc(slices.Clone(skipped), quietlySkipped)
	if len(skipped) == 0 {
		return warns
	}
	if dir == "" {
		dir = "."
	}
	slices.Sort(skipped)
	for i, name := range skipped {
		if i == maxSkippedNames {
			warns = append(warns, Problem{File: dir, Message: fmt.Sprintf("skipped %d more files, from %s on: "+
				"not .yaml or .yml files; rename them to load them", len(skipped)-maxSkippedNames, name)})
			break
		}
		warns = append(warns, Problem{File: name, Message: "skipped: not a .yaml or .yml file; rename it to load it"})
	}
	warns.sort()
	if cfg != nil {
		cfg.warnings = slices.Clone(warns)
	}
	return warns
}

// isRuleFile reports whether a configuration directory's file named name
// is read as rules: its extension is .yaml or .yml, in any case. Hidden
// files and directories (a name starting with a dot: an editor's backup,
// Kubernetes' ..data) are never read.
func isRuleFile(name string) bool {
	ext := strings.ToLower(path.Ext(name))
	return ext == ".yaml" || ext == ".yml"
}

// quietlySkipped reports whether the configuration directory's file
// named name, not read as rules, is skipped without a warning because it
// is plainly not rules: documentation, a Go file or an editor's backup.
// A directory beside the rules commonly holds a README: the README's own
// gateway command (examples/gateway, which holds README.md) warned of it
// at every start. Quiet are
//
//   - documentation: a name ending in .md, .markdown, .rst, .adoc or
//     .asciidoc; and README, LICENSE, LICENCE, NOTICE, COPYING, AUTHORS,
//     OWNERS, CODEOWNERS or CHANGELOG (in any case) without an extension
//     or with .txt;
//   - a Go file (.go): the package that embeds the directory
//     (examples/config/embed.go, which `make run` loads from disk);
//   - an editor's backup or autosave: a name ending in ~ (rules.yaml~) or
//     written #…# (Emacs).
//
// A name ending in one of those documentation extensions after .yaml,
// .yml or .json (rules.yaml.md) is still warned of, as is every other
// file: rules.yml.bak, rules.json, rules.yaml.txt, notes.txt or config
// may hold rules the user meant to load. Hidden names (.gitkeep,
// .rules.yaml.swp) are never read nor warned of.
func quietlySkipped(name string) bool {
	base := filepath.Base(name)
	if strings.HasSuffix(base, "~") || (len(base) > 1 && strings.HasPrefix(base, "#") && strings.HasSuffix(base, "#")) {
		return true
	}
	lower := strings.ToLower(base)
	ext := path.Ext(lower)
	stem := strings.TrimSuffix(lower, ext)
	switch ext {
	case ".go":
		return true
	case ".md", ".markdown", ".rst", ".adoc", ".asciidoc":
		return !isRuleFile(stem) && path.Ext(stem) != ".json"
	case "", ".txt":
		return docNames[stem]
	}
	return false
}

// docNames are the names, lower case and without .txt, of the
// documentation files a directory holds besides *.md ones.
var docNames = map[string]bool{"readme": true, "license": true, "licence": true, "notice": true, "copying": true,
	"authors": true, "owners": true, "codeowners": true, "changelog": true}

// isFile reports whether the walked entry d, not a directory and not
// hidden, is a file a reader of the directory would take for one: a
// regular file, or a symbolic link to one (a Kubernetes ConfigMap's files
// are links into ..data); stat resolves the link.
func isFile(d fs.DirEntry, stat func() (fs.FileInfo, error)) bool {
	switch {
	case d.Type().IsRegular():
		return true
	case d.Type()&fs.ModeSymlink != 0:
		fi, err := stat()
		return err == nil && fi.Mode().IsRegular()
	}
	return false
}

// maxSkippedNames bounds the files unreadRuleFiles names.
const maxSkippedNames = 10

// unreadRuleFiles is the problem of a configuration directory dir that
// holds files (skipped, not hidden) but none that is read as rules (srcs
// is empty): loaded, it would configure no domain and every request would
// be allowed, while its files were most likely meant as rules — a
// Kubernetes ConfigMap key named config mounts as a file named config,
// which envoyproxy/ratelimit reads whatever its name. Failing to load
// keeps a server from starting open, and a reload from lifting every limit
// (the rules in force stay). ok is false when the directory holds a rule
// file or no file at all: an empty directory (a ConfigMap not filled yet)
// loads with no domain and a warning, as upstream.
func unreadRuleFiles(dir string, srcs []source, skipped []string) (p Problem, ok bool) {
	if len(srcs) > 0 || len(skipped) == 0 {
		return Problem{}, false
	}
	sort.Strings(skipped)
	names := skipped
	more := ""
	if len(names) > maxSkippedNames {
		names, more = names[:maxSkippedNames], fmt.Sprintf(" and %d more", len(skipped)-maxSkippedNames)
	}
	return Problem{File: dir, Message: fmt.Sprintf("no *.yaml or *.yml file, only %s%s, which are not read: "+
		"only files named *.yaml or *.yml hold rules (a Kubernetes ConfigMap key becomes a file of that name: "+
		"name the key config.yaml, say); rename them, or the directory configures nothing and every request is allowed",
		strings.Join(names, ", "), more)}, true
}
