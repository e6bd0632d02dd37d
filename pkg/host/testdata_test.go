package host

import (
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// The sysfs trees of testdata/sysfs/*.txtar (see the comment at the top of
// each) are built into t.TempDir() for every test that uses one, so tests
// may write into them.

// treeNames are the trees in testdata/sysfs.
var treeNames = []string{"t4", "a40-vfs", "l40s-vfio", "rtx4090-group", "shared-group"}

type treeEntry struct {
	name   string // slash-separated, relative to the root
	link   string // target when the entry is a symbolic link
	dir    bool   // an empty directory
	data   []byte // a file's content
	isFile bool
}

// parseTree reads a txtar archive of a sysfs tree.
func parseTree(data []byte) ([]treeEntry, error) {
	var out []treeEntry
	var cur *treeEntry
	for i, line := range bytes.SplitAfter(data, []byte("\n")) {
		s := strings.TrimSuffix(string(line), "\n")
		if strings.HasPrefix(s, "-- ") && strings.HasSuffix(s, " --") && len(s) > 6 {
			hdr := strings.TrimSpace(s[3 : len(s)-3])
			e := treeEntry{name: hdr, isFile: true}
			if n, target, ok := strings.Cut(hdr, " -> "); ok {
				e = treeEntry{name: n, link: target}
			} else if strings.HasSuffix(hdr, "/") {
				e = treeEntry{name: strings.TrimSuffix(hdr, "/"), dir: true}
			}
			if e.name == "" || path.IsAbs(e.name) || path.Clean(e.name) != e.name || strings.HasPrefix(e.name, "..") {
				return nil, fmt.Errorf("line %d: entry name %q is not a clean relative path", i+1, e.name)
			}
			out = append(out, e)
			cur = &out[len(out)-1]
			continue
		}
		if cur == nil {
			continue // the archive's comment
		}
		if !cur.isFile {
			if strings.TrimSpace(s) != "" {
				return nil, fmt.Errorf("line %d: content after the link or directory %s", i+1, cur.name)
			}
			continue
		}
		cur.data = append(cur.data, line...)
	}
	return out, nil
}

// writeTree builds entries under root. With absLinks every link gets the
// absolute target the kernel would resolve it to ("/sys/devices/..."), as in
// a tree captured by copying links verbatim from a tool that wrote them so.
func writeTree(root string, entries []treeEntry, absLinks bool) error {
	for _, e := range entries {
		p := filepath.Join(root, filepath.FromSlash(e.name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		switch {
		case e.dir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case e.link != "":
			target := e.link
			if absLinks && !path.IsAbs(target) {
				target = "/sys/" + Clean(path.Join(path.Dir(e.name), target))
			}
			if err := os.Symlink(filepath.FromSlash(target), p); err != nil {
				return err
			}
		default:
			if err := os.WriteFile(p, e.data, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// buildTree builds testdata/sysfs/<name>.txtar into a new directory.
func buildTree(t testing.TB, name string, absLinks bool) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "sysfs", name+".txtar"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := parseTree(data)
	if err != nil {
		t.Fatalf("testdata/sysfs/%s.txtar: %v", name, err)
	}
	root := t.TempDir()
	if err := writeTree(root, entries, absLinks); err != nil {
		t.Fatalf("build tree %s: %v", name, err)
	}
	return root
}

// treeFS builds a tree and returns it as a SysFS.
func treeFS(t testing.TB, name string) SysFS {
	t.Helper()
	return NewDir(buildTree(t, name, false))
}

// forEachLinkStyle runs f on the tree with relative links (as on a host) and
// with absolute /sys links (which Dir must re-root into the tree).
func forEachLinkStyle(t *testing.T, name string, f func(t *testing.T, fsys SysFS)) {
	t.Helper()
	for _, style := range []struct {
		name string
		abs  bool
	}{{"relative-links", false}, {"absolute-links", true}} {
		t.Run(style.name, func(t *testing.T) {
			f(t, NewDir(buildTree(t, name, style.abs)))
		})
	}
}

// writeFiles builds a small tree from a map of name -> content; a content
// starting with "-> " makes a link.
func writeFiles(t testing.TB, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(content, "-> "); ok {
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if strings.HasSuffix(name, "/") {
			continue
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestTreesParse(t *testing.T) {
	for _, name := range treeNames {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "sysfs", name+".txtar"))
			if err != nil {
				t.Fatal(err)
			}
			entries, err := parseTree(data)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			for _, e := range entries {
				if seen[e.name] {
					t.Errorf("%s appears twice", e.name)
				}
				seen[e.name] = true
				if e.link != "" && path.IsAbs(e.link) {
					t.Errorf("%s -> %s: links in testdata are relative, as on a host", e.name, e.link)
				}
			}
		})
	}
}

// TestTreeLinksResolve checks the hand-written link targets: each one leads
// to something in the tree (a device directory, a driver, an IOMMU group),
// both when the OS follows it and through Dir, and to the same place.
func TestTreeLinksResolve(t *testing.T) {
	for _, name := range treeNames {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "sysfs", name+".txtar"))
			if err != nil {
				t.Fatal(err)
			}
			entries, err := parseTree(data)
			if err != nil {
				t.Fatal(err)
			}
			root := buildTree(t, name, false)
			absRoot := buildTree(t, name, true)
			realRoot, err := filepath.EvalSymlinks(root)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if e.link == "" {
					continue
				}
				target := path.Join(path.Dir(e.name), e.link)
				if strings.HasPrefix(target, "..") {
					t.Errorf("%s -> %s leaves the tree", e.name, e.link)
					continue
				}
				want, err := filepath.EvalSymlinks(filepath.Join(root, filepath.FromSlash(e.name)))
				if err != nil {
					t.Errorf("%s -> %s: %v", e.name, e.link, err)
					continue
				}
				wantRel, err := filepath.Rel(realRoot, want)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range []string{root, absRoot} {
					got, err := NewDir(r).resolve(e.name, "stat", true)
					if err != nil {
						t.Errorf("resolve %s: %v", e.name, err)
						continue
					}
					rel, _ := filepath.Rel(r, got)
					if rel != wantRel {
						t.Errorf("Dir(%s).resolve(%s) = %s, the OS says %s", filepath.Base(r), e.name, rel, wantRel)
					}
				}
			}
		})
	}
}
