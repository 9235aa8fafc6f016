package localcassandra

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Class data sharing (CDS): a JVM that maps an archive of the classes an earlier node loaded skips
// most of loading and verifying Cassandra's classes. On this two-core machine a node's start then
// took 7.3-7.7 CPU seconds instead of 8.0-9.8 (go run ./hack/cassandra start, java's utime+stime
// when the node answered CQL, alternating runs with and without the archive), and make test starts
// about twenty nodes.
//
// The archive is made by the first node that stops cleanly on a machine (-XX:ArchiveClassesAtExit:
// the JVM writes it on its way out) and kept in the cache beside the jars, named after the java
// binary, so that another JDK makes its own. The JVM checks the archive against itself and the
// class path when it maps it, and runs without it (a warning in console.log) when they do not
// match; a node is never worse off than without CDS. The jamm java agent that Cassandra loads needs
// the diagnostic AllowArchivingWithJavaAgent, for writing and for mapping.

// cdsArchiveFile is the file name of the archive a node writes into its directory on exit.
const cdsArchiveFile = "classes.jsa"

// cdsArchivePath returns where the cache keeps the archive of the JVM java for cfg's version.
func (cfg Config) cdsArchivePath(java string) (string, error) {
	fi, err := os.Stat(java)
	if err != nil {
		return "", fmt.Errorf("localcassandra: %w", err)
	}
	real, err := filepath.EvalSymlinks(java)
	if err != nil {
		return "", fmt.Errorf("localcassandra: %w", err)
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d\x00%d", real, fi.Size(), fi.ModTime().UnixNano()))
	return filepath.Join(cfg.CacheDir, cfg.Version, "cds", hex.EncodeToString(sum[:8])+".jsa"), nil
}

// cdsArgs returns the JVM flags of node i: map the cached archive when there is one, else let
// node 0 write one when it exits (the others need not: one archive is all the cache keeps).
// Nothing when archive is empty (no archive path could be made).
func (cfg Config) cdsArgs(archive string, i int) []string {
	if archive == "" {
		return nil
	}
	unlock := []string{"-XX:+UnlockDiagnosticVMOptions", "-XX:+AllowArchivingWithJavaAgent"}
	if _, err := os.Stat(archive); err == nil {
		return append(unlock, "-XX:SharedArchiveFile="+archive)
	}
	if i != 0 {
		return nil
	}
	return append(unlock, "-XX:ArchiveClassesAtExit="+filepath.Join(cfg.nodeDir(i), cdsArchiveFile))
}

// keepCDSArchive copies the archive node 0 wrote on exit, if any, into the cache at archive, unless
// the cache has one already. The copy is written under a temporary name and renamed, so that a JVM
// starting meanwhile in another process maps either no archive or a whole one.
func (cfg Config) keepCDSArchive(archive string) error {
	if archive == "" {
		return nil
	}
	if _, err := os.Stat(archive); err == nil {
		return nil
	}
	src, err := os.Open(filepath.Join(cfg.nodeDir(0), cdsArchiveFile))
	if os.IsNotExist(err) {
		return nil // node 0 did not write one (killed, or it mapped the archive)
	}
	if err != nil {
		return fmt.Errorf("localcassandra: %w", err)
	}
	defer src.Close()
	if err := os.MkdirAll(filepath.Dir(archive), 0o755); err != nil {
		return fmt.Errorf("localcassandra: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(archive), ".tmp-*.jsa")
	if err != nil {
		return fmt.Errorf("localcassandra: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing to remove
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return fmt.Errorf("localcassandra: copy the class data sharing archive: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("localcassandra: %w", err)
	}
	if err := os.Rename(tmp.Name(), archive); err != nil {
		return fmt.Errorf("localcassandra: %w", err)
	}
	return nil
}
