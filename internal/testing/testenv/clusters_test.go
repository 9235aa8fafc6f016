package testenv

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/testing/localcassandra"
)

// repoRoot is the module root, from this package's directory.
const repoRoot = "../../.."

func TestCassandraTableIsDisjoint(t *testing.T) {
	rows := append(append([]cassandraCluster(nil), cassandraClusters...), reservedCassandraPorts...)
	for _, preset := range []localcassandra.Config{localcassandra.Single(), localcassandra.Trio(), localcassandra.Demo()} {
		rows = append(rows, cassandraCluster{name: preset.Name, nativePort: preset.NativePort, storagePort: preset.StoragePort, owner: "localcassandra preset"})
	}
	ports, names := map[int]string{}, map[string]bool{}
	for _, r := range rows {
		if names[r.name] {
			t.Errorf("cluster name %q appears twice", r.name)
		}
		names[r.name] = true
		for _, p := range []int{r.nativePort, r.storagePort} {
			if p <= 0 || p >= 32768 {
				t.Errorf("%s: port %d outside 1-32767 (32768 and up is Linux's ephemeral range)", r.name, p)
			}
			if other, ok := ports[p]; ok {
				t.Errorf("port %d is both %s's and %s's", p, other, r.name)
			}
			ports[p] = r.name
		}
	}
}

func TestCassandraConfig(t *testing.T) {
	cfg := CassandraConfig("cstore-trio")
	if cfg.Name != "cstore-trio" || cfg.Nodes != 3 || len(cfg.IPs) != 3 || cfg.NativePort != 9542 || cfg.StoragePort != 7500 {
		t.Errorf("CassandraConfig(cstore-trio) = %+v", cfg)
	}
	defer func() {
		if recover() == nil {
			t.Error("CassandraConfig of an unknown name did not panic")
		}
	}()
	CassandraConfig("no-such-cluster")
}

// TestCassandraNamesHaveOneOwner reads every Go file of the module: each CassandraConfig call
// names a row of the table with a string literal from the row's owner directory, and no file
// outside localcassandra's presets, testenv and hack/ (tools, not test binaries) sets a Cassandra port.
func TestCassandraNamesHaveOneOwner(t *testing.T) {
	owners := map[string]string{}
	for _, r := range cassandraClusters {
		owners[r.name] = r.owner
	}
	used := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n != "." && n != ".." && (strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, err := filepath.Rel(repoRoot, path)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		// localcassandra's presets and the table itself set ports; so may tools (hack/), which are
		// not test binaries. localcassandra's own tests take theirs from the table.
		portsAllowed := (dir == "internal/testing/localcassandra" && !strings.HasSuffix(path, "_test.go")) ||
			dir == "internal/testing/testenv" || strings.HasPrefix(dir, "hack/")
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "CassandraConfig" {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "testenv" {
					return true
				}
				lit, ok := n.Args[0].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Errorf("%s: testenv.CassandraConfig with a name that is not a string literal", fset.Position(n.Pos()))
					return true
				}
				name, _ := strconv.Unquote(lit.Value)
				if owner, ok := owners[name]; !ok {
					t.Errorf("%s: cluster %q has no row in the table", fset.Position(n.Pos()), name)
				} else if owner != dir {
					t.Errorf("%s: cluster %q belongs to %s, not %s: give this package a row of its own", fset.Position(n.Pos()), name, owner, dir)
				}
				used[name] = true
			case *ast.KeyValueExpr:
				if k, ok := n.Key.(*ast.Ident); ok && isPortField(k.Name) && !portsAllowed {
					t.Errorf("%s: %s set by hand: take the cluster from testenv.CassandraConfig", fset.Position(n.Pos()), k.Name)
				}
			case *ast.AssignStmt:
				for _, lhs := range n.Lhs {
					if sel, ok := lhs.(*ast.SelectorExpr); ok && isPortField(sel.Sel.Name) && !portsAllowed {
						t.Errorf("%s: %s set by hand: take the cluster from testenv.CassandraConfig", fset.Position(n.Pos()), sel.Sel.Name)
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range cassandraClusters {
		if !used[r.name] {
			t.Errorf("cluster %q in the table is used nowhere: remove its row", r.name)
		}
	}
}

func isPortField(name string) bool { return name == "NativePort" || name == "StoragePort" }
