module github.com/baton-dev/baton

go 1.26.8

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/apache/cassandra-gocql-driver/v2 v2.1.2
	github.com/go-logr/logr v1.4.4
	k8s.io/utils v0.0.0-20260707023825-cf1189d6abe3
)

require gopkg.in/inf.v0 v0.9.1 // indirect
