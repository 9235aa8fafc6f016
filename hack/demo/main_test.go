package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// TestLibraryLogsGoToTheDemoLog checks that what controller-runtime and client-go log lands in the
// demo's log file, not on stderr: controller-runtime without a logger prints a goroutine dump in
// the middle of the demo's output once the process is 30 s old.
func TestLibraryLogsGoToTheDemoLog(t *testing.T) {
	logs, err := openLog(filepath.Join(t.TempDir(), "demo.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logs.file.Close()
	routeLibraryLogs(logs.log)
	ctrllog.Log.WithName("client").Info("from controller-runtime")
	klog.Warning("from client-go")
	klog.Flush()
	b, err := os.ReadFile(logs.path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"msg":"from controller-runtime"`, `"msg":"from client-go"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the demo log lacks %s; it holds:\n%s", want, b)
		}
	}
}
