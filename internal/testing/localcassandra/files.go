package localcassandra

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// jvmServerOptions are the static flags of Cassandra 5.0's conf/jvm-server.options
// that apply to a JDK 17 test node. Left out on purpose: -XX:+AlwaysPreTouch
// (would make every node touch its whole heap: slower start, higher RSS),
// -XX:+UseNUMA, -XX:-UseBiasedLocking (deprecated on 17) and
// -XX:+HeapDumpOnOutOfMemoryError (dumps are large; ExitOnOutOfMemoryError
// below ends the node instead).
var jvmServerOptions = []string{
	"-ea",
	"-da:net.openhft...",
	"-XX:+UseThreadPriorities",
	"-Xss256k",
	"-XX:+UseTLAB",
	"-XX:+ResizeTLAB",
	"-XX:+PerfDisableSharedMem",
	"-Djava.net.preferIPv4Stack=true",
	"-XX:+ExitOnOutOfMemoryError",
}

// jvm17ServerOptions are conf/jvm17-server.options (Cassandra 5.0): G1 and the
// JPMS exports/opens Cassandra needs on Java 17, plus the netty properties.
// -XX:G1HeapRegionSize=16m is left to the JVM because test heaps are small.
var jvm17ServerOptions = []string{
	"-XX:+UseG1GC",
	"-XX:+ParallelRefProcEnabled",
	"-XX:MaxTenuringThreshold=1",
	"-XX:G1RSetUpdatingPauseTimePercent=5",
	"-XX:MaxGCPauseMillis=300",
	"-XX:InitiatingHeapOccupancyPercent=70",

	"-Djdk.attach.allowAttachSelf=true",
	"--add-exports", "java.base/jdk.internal.misc=ALL-UNNAMED",
	"--add-exports", "java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED",
	"--add-exports", "java.rmi/sun.rmi.registry=ALL-UNNAMED",
	"--add-exports", "java.rmi/sun.rmi.server=ALL-UNNAMED",
	"--add-exports", "java.sql/java.sql=ALL-UNNAMED",
	"--add-exports", "java.base/java.lang.ref=ALL-UNNAMED",
	"--add-exports", "jdk.unsupported/sun.misc=ALL-UNNAMED",
	"--add-exports", "jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
	"--add-exports", "jdk.attach/sun.tools.attach=ALL-UNNAMED",

	"--add-opens", "java.base/java.lang.module=ALL-UNNAMED",
	"--add-opens", "java.base/jdk.internal.loader=ALL-UNNAMED",
	"--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
	"--add-opens", "java.base/jdk.internal.reflect=ALL-UNNAMED",
	"--add-opens", "java.base/jdk.internal.math=ALL-UNNAMED",
	"--add-opens", "java.base/jdk.internal.module=ALL-UNNAMED",
	"--add-opens", "java.base/jdk.internal.util.jar=ALL-UNNAMED",
	"--add-opens", "jdk.management/com.sun.management.internal=ALL-UNNAMED",
	"--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
	"--add-opens", "java.base/java.io=ALL-UNNAMED",
	"--add-opens", "java.base/java.lang.reflect=ALL-UNNAMED",
	"--add-opens", "jdk.compiler/com.sun.tools.javac=ALL-UNNAMED",
	"--add-opens", "java.base/java.lang=ALL-UNNAMED",
	"--add-opens", "java.base/java.util=ALL-UNNAMED",

	"-Dio.netty.tryReflectionSetAccessible=true",
	"-Dio.netty.allocator.useCacheForAllThreads=true",
	"-Dio.netty.allocator.maxOrder=11",
}

const mainClass = "org.apache.cassandra.service.CassandraDaemon"

// jvmArgs returns the full java argument list for node i; cdsArchive is the cache's class data
// sharing archive (cdsArgs), or empty.
func (cfg Config) jvmArgs(libDir string, i int, cdsArchive string) ([]string, error) {
	jamm, _ := filepath.Glob(filepath.Join(libDir, "jamm-*.jar"))
	if len(jamm) == 0 {
		return nil, fmt.Errorf("localcassandra: no jamm jar in %s (reinstall: remove %s)", libDir, filepath.Dir(libDir))
	}
	dir := cfg.nodeDir(i)
	// -Xms below -Xmx: Cassandra mlockall()s its memory at startup when it
	// may (e.g. as root), which makes the whole initial heap resident.
	xms, xmx := strconv.Itoa(max(cfg.HeapMB/2, 64))+"m", strconv.Itoa(cfg.HeapMB)+"m"
	args := append([]string{}, jvmServerOptions...)
	args = append(args, jvm17ServerOptions...)
	args = append(args,
		"-Xms"+xms, "-Xmx"+xmx,
		"-javaagent:"+jamm[0],
		"-Dcassandra-foreground=yes",
		"-Dcassandra.config=file://"+filepath.Join(dir, "cassandra.yaml"),
		"-Dcassandra.storagedir="+filepath.Join(dir, "data"),
		"-Dcassandra.logdir="+filepath.Join(dir, "logs"),
		"-Dcassandra.triggers_dir="+filepath.Join(dir, "triggers"),
		"-Dlogback.configurationFile="+filepath.Join(dir, "logback.xml"),
		// Fast start of a fresh test cluster.
		"-Dcassandra.skip_wait_for_gossip_to_settle=0",
		// cassandra.ring_delay_ms keeps its default (30s) on purpose: it also
		// bounds how long a non-seed node waits in its gossip shadow round
		// for the seed, and with all nodes starting at once on a busy
		// machine the seed may take well over 10s to listen.
		"-Dcassandra.superuser_setup_delay_ms=0",
		"-Dcassandra.migration_delay_ms=0",
		// Replicate system_distributed to every node (at most 3), so that
		// Start can check that nodes see each other with a CL=ALL read.
		"-Dcassandra.system_distributed.default_rf="+strconv.Itoa(min(cfg.Nodes, 3)),
		"-Dchronicle.announcer.disable=true",
		// No cassandra.jmx.local.port / cassandra.jmx.remote.port: Cassandra
		// then starts no JMX server, so nodes cannot clash on port 7199.
	)
	if !cfg.FullJIT {
		// C1 only: on 2 cores a 3-node cluster starts in ~16s instead of ~25s.
		args = append(args, "-XX:TieredStopAtLevel=1")
	}
	args = append(args, cfg.cdsArgs(cdsArchive, i)...)
	args = append(args, cfg.ExtraJVMArgs...)
	args = append(args, "-cp", filepath.Join(libDir, "*"), mainClass)
	return args, nil
}

// writeNodeFiles creates node i's directories, cassandra.yaml and logback.xml.
func (cfg Config) writeNodeFiles(i int) error {
	dir := cfg.nodeDir(i)
	for _, d := range []string{"data", "commitlog", "hints", "saved_caches", "cdc_raw", "logs", "triggers"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return fmt.Errorf("localcassandra: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "cassandra.yaml"), []byte(cfg.yaml(i)), 0o644); err != nil {
		return fmt.Errorf("localcassandra: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "logback.xml"), []byte(logbackXML), 0o644); err != nil {
		return fmt.Errorf("localcassandra: %w", err)
	}
	return nil
}

// yaml returns a minimal cassandra.yaml (5.0 key names) for node i.
func (cfg Config) yaml(i int) string {
	dir := cfg.nodeDir(i)
	authorizer := "AllowAllAuthorizer"
	if cfg.Authenticator != AllowAllAuthenticator {
		authorizer = "CassandraAuthorizer"
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("# Written by baton's internal/testing/localcassandra for cluster %q, node %d.", cfg.Name, i+1)
	w("cluster_name: baton-%s", cfg.Name)
	w("num_tokens: %d", cfg.NumTokens)
	w("partitioner: org.apache.cassandra.dht.Murmur3Partitioner")
	w("auto_bootstrap: false")
	w("seed_provider:")
	w("  - class_name: org.apache.cassandra.locator.SimpleSeedProvider")
	w("    parameters:")
	w("      - seeds: %q", fmt.Sprintf("%s:%d", cfg.IPs[0], cfg.StoragePort))
	w("listen_address: %s", cfg.IPs[i])
	w("rpc_address: %s", cfg.IPs[i])
	w("storage_port: %d", cfg.StoragePort)
	w("native_transport_port: %d", cfg.NativePort)
	w("start_native_transport: true")
	w("endpoint_snitch: SimpleSnitch")
	w("authenticator: %s", cfg.Authenticator)
	w("authorizer: %s", authorizer)
	w("role_manager: CassandraRoleManager")
	w("data_file_directories:")
	w("  - %s", filepath.Join(dir, "data"))
	w("commitlog_directory: %s", filepath.Join(dir, "commitlog"))
	w("hints_directory: %s", filepath.Join(dir, "hints"))
	w("saved_caches_directory: %s", filepath.Join(dir, "saved_caches"))
	w("cdc_raw_directory: %s", filepath.Join(dir, "cdc_raw"))
	w("commitlog_sync: periodic")
	w("commitlog_sync_period: 10000ms")
	w("commitlog_segment_size: 16MiB")
	w("commitlog_total_space: 128MiB")
	w("paxos_variant: %s", cfg.PaxosVariant)
	w("storage_compatibility_mode: NONE")
	w("disk_access_mode: mmap_index_only")
	w("memtable_heap_space: %dMiB", max(cfg.HeapMB/8, 16))
	w("memtable_offheap_space: %dMiB", max(cfg.HeapMB/8, 16))
	w("key_cache_size: 8MiB")
	w("counter_cache_size: 4MiB")
	w("prepared_statements_cache_size: 8MiB")
	w("file_cache_size: 32MiB")
	w("networking_cache_size: 16MiB")
	w("index_summary_capacity: 8MiB")
	w("concurrent_reads: 8")
	w("concurrent_writes: 8")
	w("concurrent_counter_writes: 8")
	w("native_transport_max_threads: 32")
	w("auto_snapshot: false")
	if cfg.ExtraYAML != "" {
		b.WriteString(cfg.ExtraYAML)
		b.WriteString("\n")
	}
	return b.String()
}

// logbackXML: INFO and above to logs/system.log, WARN and above to stderr
// (which Start redirects to console.log next to it).
const logbackXML = `<configuration>
  <!-- Written by baton's internal/testing/localcassandra. No shutdown hook: Cassandra runs it itself. -->
  <appender name="SYSTEMLOG" class="ch.qos.logback.core.rolling.RollingFileAppender">
    <filter class="ch.qos.logback.classic.filter.ThresholdFilter">
      <level>INFO</level>
    </filter>
    <file>${cassandra.logdir}/system.log</file>
    <rollingPolicy class="ch.qos.logback.core.rolling.FixedWindowRollingPolicy">
      <fileNamePattern>${cassandra.logdir}/system.log.%i.zip</fileNamePattern>
      <minIndex>1</minIndex>
      <maxIndex>3</maxIndex>
    </rollingPolicy>
    <triggeringPolicy class="ch.qos.logback.core.rolling.SizeBasedTriggeringPolicy">
      <maxFileSize>20MB</maxFileSize>
    </triggeringPolicy>
    <encoder>
      <pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern>
    </encoder>
  </appender>
  <appender name="STDERR" class="ch.qos.logback.core.ConsoleAppender">
    <target>System.err</target>
    <filter class="ch.qos.logback.classic.filter.ThresholdFilter">
      <level>WARN</level>
    </filter>
    <encoder>
      <pattern>%-5level %date{HH:mm:ss.SSS} %msg%n</pattern>
    </encoder>
  </appender>
  <root level="INFO">
    <appender-ref ref="SYSTEMLOG" />
    <appender-ref ref="STDERR" />
  </root>
</configuration>
`
