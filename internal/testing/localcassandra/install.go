package localcassandra

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/build/gobuild"
	"github.com/baton-dev/baton/internal/testing/filelock"
)

const (
	stampFile = ".installed"
	// dependencyPlugin is pinned so installs are reproducible (Maven 3.8's
	// implicit default is the old 2.8).
	dependencyPlugin = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"
)

const pomTemplate = `<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by baton's internal/testing/localcassandra: resolves Cassandra's runtime jars. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.baton.localcassandra</groupId>
  <artifactId>cassandra-runtime</artifactId>
  <version>%[1]s</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.cassandra</groupId>
      <artifactId>cassandra-all</artifactId>
      <version>%[1]s</version>
    </dependency>
  </dependencies>
</project>
`

// Install makes sure Cassandra cfg.Version and its runtime dependencies are in
// the cache and returns the directory holding the jars. It is idempotent and
// safe to call from several processes at once. It writes one progress line
// when the cache already holds them, and lines at the start and end of an
// install (and while it waits for another process's install).
func Install(ctx context.Context, cfg Config) (libDir string, err error) {
	return install(ctx, cfg, true)
}

// install is Install; reportCached says whether a cache hit gets a progress
// line (Start, which installs on its way, keeps quiet about a cache hit).
func install(ctx context.Context, cfg Config, reportCached bool) (libDir string, err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return "", err
	}
	if _, err := javaBinary(ctx, cfg); err != nil {
		return "", err
	}
	dir := filepath.Join(cfg.CacheDir, cfg.Version)
	libDir = filepath.Join(dir, "lib")
	cached := func() bool {
		if !installed(dir, cfg.Version) {
			return false
		}
		if reportCached {
			fmt.Fprintf(cfg.Progress, "cassandra: Cassandra %s already installed in %s (cache reused)\n", cfg.Version, dir)
		}
		return true
	}
	if cached() {
		return libDir, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("localcassandra: install: %w", err)
	}
	waitStart := time.Now()
	unlock, err := filelock.Lock(ctx, filepath.Join(dir, ".lock"), func() {
		fmt.Fprintf(cfg.Progress, "cassandra: another process is installing Cassandra %s into %s; waiting for it...\n", cfg.Version, dir)
	})
	if err != nil {
		return "", fmt.Errorf("localcassandra: install: %w", err)
	}
	defer unlock()
	if installed(dir, cfg.Version) { // another process finished while we waited
		fmt.Fprintf(cfg.Progress, "cassandra: Cassandra %s installed by another process in %s (waited %s)\n", cfg.Version, dir, since(waitStart))
		return libDir, nil
	}

	mvn := cfg.Maven
	if mvn == "" {
		mvn = "mvn"
	}
	mvnPath, err := exec.LookPath(mvn)
	if err != nil {
		return "", fmt.Errorf("localcassandra: Maven (%s) not found: install Maven 3 (e.g. apt-get install maven) so Cassandra's jars can be fetched from Maven Central: %w", mvn, err)
	}

	logPath := filepath.Join(dir, "install.log")
	_ = os.Remove(logPath) // each attempt appends to a fresh log
	_ = os.Remove(filepath.Join(dir, stampFile))
	if err := os.RemoveAll(libDir); err != nil {
		return "", fmt.Errorf("localcassandra: install: %w", err)
	}
	pom := filepath.Join(dir, "pom.xml")
	if err := os.WriteFile(pom, fmt.Appendf(nil, pomTemplate, cfg.Version), 0o644); err != nil {
		return "", fmt.Errorf("localcassandra: install: %w", err)
	}
	tmpLib := filepath.Join(dir, "lib.tmp")
	err = gobuild.Step{
		Prefix:   "cassandra",
		What:     "installing Cassandra " + cfg.Version + " from Maven Central",
		Expect:   "its runtime jars into " + dir + "; mvn prints nothing until it is done, about a minute with an empty ~/.m2; log " + logPath,
		Hint:     "check that Maven Central can be reached (a proxy goes in ~/.m2/settings.xml), and see " + logPath,
		Progress: cfg.Progress,
		Timeout:  mavenTimeout,
	}.Run(ctx, func(ctx context.Context) error { return fetchJars(ctx, mvnPath, dir, pom, tmpLib, logPath) })
	if err != nil {
		return "", fmt.Errorf("localcassandra: %w", err)
	}
	for _, want := range []string{"cassandra-all-" + cfg.Version + ".jar", "jamm-*.jar", "netty-all-*.jar"} {
		if m, _ := filepath.Glob(filepath.Join(tmpLib, want)); len(m) == 0 {
			return "", fmt.Errorf("localcassandra: install: %s missing after mvn (log %s)", want, logPath)
		}
	}
	if err := os.Rename(tmpLib, libDir); err != nil {
		return "", fmt.Errorf("localcassandra: install: %w", err)
	}
	stampTmp := filepath.Join(dir, stampFile+".tmp")
	if err := os.WriteFile(stampTmp, []byte(cfg.Version+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("localcassandra: install: %w", err)
	}
	if err := os.Rename(stampTmp, filepath.Join(dir, stampFile)); err != nil {
		return "", fmt.Errorf("localcassandra: install: %w", err)
	}
	return libDir, nil
}

// mavenTimeout bounds one attempt at fetching Cassandra's jars, which took 71 s with an empty
// local repository on this project's 2-core machine (hack/cassandra install with
// MAVEN_OPTS=-Dmaven.repo.local=<empty dir>): a stalled download is given up well after that, and
// tried again.
const mavenTimeout = 10 * time.Minute

// fetchJars runs mvn once to copy Cassandra's runtime jars into tmpLib, afresh, logging to
// logPath (appended to: the log keeps every attempt).
func fetchJars(ctx context.Context, mvn, dir, pom, tmpLib, logPath string) error {
	if err := os.RemoveAll(tmpLib); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	defer logFile.Close()
	cmd := exec.CommandContext(ctx, mvn, "-B", "--no-transfer-progress", "-Dstyle.color=never", "-f", pom,
		dependencyPlugin+":copy-dependencies",
		"-DincludeScope=runtime", "-DoutputDirectory="+tmpLib)
	cmd.Dir = dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.WaitDelay = 10 * time.Second
	fmt.Fprintf(logFile, "+ %s\n", strings.Join(cmd.Args, " "))
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("mvn dependency:copy-dependencies: %w", context.Cause(ctx))
		}
		return fmt.Errorf("mvn dependency:copy-dependencies failed (log %s):\n%s\n%w", logPath, tailFile(logPath, 10), err)
	}
	return nil
}

func installed(dir, version string) bool {
	b, err := os.ReadFile(filepath.Join(dir, stampFile))
	if err != nil || strings.TrimSpace(string(b)) != version {
		return false
	}
	_, err = os.Stat(filepath.Join(dir, "lib", "cassandra-all-"+version+".jar"))
	return err == nil
}

var javaVersionRE = regexp.MustCompile(`version "(\d+)(?:\.(\d+))?`)

// javaBinary finds java and checks that it is version 17 or newer.
func javaBinary(ctx context.Context, cfg Config) (string, error) {
	java := cfg.Java
	if java == "" {
		java = "java"
		if jh := os.Getenv("JAVA_HOME"); jh != "" {
			if _, err := os.Stat(filepath.Join(jh, "bin", "java")); err == nil {
				java = filepath.Join(jh, "bin", "java")
			}
		}
	}
	path, err := exec.LookPath(java)
	if err != nil {
		return "", fmt.Errorf("localcassandra: java (%s) not found: install a JDK 17 or newer (e.g. apt-get install openjdk-17-jdk-headless) or set JAVA_HOME: %w", java, err)
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, path, "-version")
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("localcassandra: %s -version failed: %s: %w", path, strings.TrimSpace(out.String()), err)
	}
	m := javaVersionRE.FindStringSubmatch(out.String())
	if m == nil {
		return "", fmt.Errorf("localcassandra: cannot parse the output of %s -version: %q", path, out.String())
	}
	major, _ := strconv.Atoi(m[1])
	if major == 1 && m[2] != "" { // 1.8 style
		major, _ = strconv.Atoi(m[2])
	}
	if major < 17 {
		return "", fmt.Errorf("localcassandra: %s is Java %d; Cassandra 5.0 here needs Java 17+: install a JDK 17 (e.g. apt-get install openjdk-17-jdk-headless) or set JAVA_HOME", path, major)
	}
	return path, nil
}

// tailFile returns the last n lines of a file, or a note that it is unreadable.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	b = ansiEscape.ReplaceAll(b, nil) // mvn resets colours even in batch mode
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ansiEscape matches a terminal's colour and style sequences.
var ansiEscape = regexp.MustCompile("\x1b\\[[0-9;]*m")
