package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KubectlTable is what `kubectl get` prints for a list, as the API server renders it: Header holds
// the columns shown without -o wide, upper case as kubectl prints them, and each row maps every
// column (wide ones too) to its cell.
type KubectlTable struct {
	Header []string
	Rows   []map[string]string
}

// Table asks the API server for the Table of the objects at path (for example
// "/apis/baton.dev/v1/namespaces/ns/distributedlocks"), the one `kubectl get` prints. Numbers
// keep every digit: a fencing token is an int64 that a float64 would round.
func (k *Kube) Table(ctx context.Context, t testing.TB, path string) KubectlTable {
	t.Helper()
	raw, err := k.Client(t).CoreV1().RESTClient().Get().AbsPath(path).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
	if err != nil {
		t.Fatalf("table of %s: %v", path, err)
	}
	var table metav1.Table
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&table); err != nil {
		t.Fatalf("table of %s: %v", path, err)
	}
	var out KubectlTable
	for _, col := range table.ColumnDefinitions {
		if col.Priority == 0 {
			out.Header = append(out.Header, strings.ToUpper(col.Name))
		}
	}
	for _, r := range table.Rows {
		row := map[string]string{}
		for i, col := range table.ColumnDefinitions {
			if i < len(r.Cells) {
				row[strings.ToUpper(col.Name)] = fmt.Sprint(r.Cells[i])
			}
		}
		out.Rows = append(out.Rows, row)
	}
	return out
}
