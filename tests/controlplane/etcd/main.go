// Command etcd runs a single-member etcd embedded in this process, for the controlplane tests
// and the side-by-side benchmark: the same server library kube-apiserver's own integration
// tests embed, at the version k8s.io/kubernetes pins, with the few flags a loopback test
// cluster needs. It stops cleanly on SIGTERM or SIGINT.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func mustURL(raw string) url.URL {
	u, err := url.Parse(raw)
	if err != nil {
		log.Fatalf("etcd: bad URL %q: %v", raw, err)
	}
	return *u
}

func main() {
	dataDir := flag.String("data-dir", "", "directory for etcd's data (required)")
	clientURL := flag.String("listen-client-url", "http://127.0.0.1:2379", "client URL to serve")
	peerURL := flag.String("listen-peer-url", "http://127.0.0.1:2380", "peer URL (single member)")
	noFsync := flag.Bool("unsafe-no-fsync", false, "skip fsync: faster, loses data on a crash")
	quota := flag.Int64("quota-backend-bytes", 2<<30, "backend size limit in bytes")
	logLevel := flag.String("log-level", "warn", "zap log level")
	flag.Parse()
	if *dataDir == "" {
		fmt.Fprintln(os.Stderr, "etcd: --data-dir is required")
		os.Exit(2)
	}

	cfg := embed.NewConfig()
	cfg.Name = "controlplane"
	cfg.Dir = *dataDir
	cfg.ListenClientUrls = []url.URL{mustURL(*clientURL)}
	cfg.AdvertiseClientUrls = cfg.ListenClientUrls
	cfg.ListenPeerUrls = []url.URL{mustURL(*peerURL)}
	cfg.AdvertisePeerUrls = cfg.ListenPeerUrls
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.UnsafeNoFsync = *noFsync
	cfg.QuotaBackendBytes = *quota
	cfg.LogLevel = *logLevel
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "5m"

	server, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("etcd: start: %v", err)
	}
	select {
	case <-server.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		server.Close()
		log.Fatal("etcd: not ready after 60s")
	}
	fmt.Fprintf(os.Stderr, "etcd: ready on %s\n", *clientURL)

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	select {
	case sig := <-signals:
		fmt.Fprintf(os.Stderr, "etcd: %s, stopping\n", sig)
		server.Close()
	case err := <-server.Err():
		log.Fatalf("etcd: %v", err)
	}
}
