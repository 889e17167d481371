package tiered_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/tiered"
)

// serverProperties are the keys of Kafka 4.0's config/server.properties
// (a combined KRaft node), with the tiering keys a broker adds: what a
// broker hands ParseManagerConfig.
var serverProperties = map[string]string{
	"process.roles":                                    "broker,controller",
	"node.id":                                          "1",
	"controller.quorum.bootstrap.servers":              "localhost:9093",
	"listeners":                                        "PLAINTEXT://:9092,CONTROLLER://:9093",
	"inter.broker.listener.name":                       "PLAINTEXT",
	"advertised.listeners":                             "PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
	"controller.listener.names":                        "CONTROLLER",
	"listener.security.protocol.map":                   "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
	"num.network.threads":                              "3",
	"num.io.threads":                                   "8",
	"socket.send.buffer.bytes":                         "102400",
	"socket.receive.buffer.bytes":                      "102400",
	"socket.request.max.bytes":                         "104857600",
	"log.dirs":                                         "/tmp/kraft-combined-logs",
	"num.partitions":                                   "1",
	"num.recovery.threads.per.data.dir":                "1",
	"offsets.topic.replication.factor":                 "1",
	"share.coordinator.state.topic.replication.factor": "1",
	"share.coordinator.state.topic.min.isr":            "1",
	"transaction.state.log.replication.factor":         "1",
	"transaction.state.log.min.isr":                    "1",
	"log.flush.interval.messages":                      "10000",
	"log.flush.interval.ms":                            "1000",
	"log.retention.hours":                              "168",
	"log.retention.bytes":                              "1073741824",
	"log.segment.bytes":                                "1073741824",
	"log.retention.check.interval.ms":                  "300000",
	// Tiering, as a broker that runs it sets it.
	"remote.log.storage.system.enable":                         "true",
	"remote.log.storage.manager.class.name":                    "org.example.RemoteStorageManager",
	"remote.log.metadata.manager.listener.name":                "PLAINTEXT",
	"rlmm.config.remote.log.metadata.topic.replication.factor": "1",
	"rsm.config.bucket":                                        "tiers",
	"log.local.retention.ms":                                   "3600000",
	"remote.log.manager.task.interval.ms":                      "5000",
	"remote.log.manager.copier.thread.pool.size":               "4",
	"remote.log.manager.copy.max.bytes.per.second":             "1048576",
	"remote.log.reader.threads":                                "6",
	"remote.log.index.file.cache.total.size.bytes":             "1073741824",
	// A listener's own settings, and a broker-wide topic default.
	"listener.name.ssl.ssl.keystore.location": "/etc/kafka/keystore.jks",
	"ssl.keystore.location":                   "/etc/kafka/keystore.jks",
	"min.insync.replicas":                     "1",
	"compression.type":                        "producer",
}

// TestParseManagerConfigBrokerProperties: a real broker's properties
// parse: the remote log manager keys are applied, every other key of
// Kafka's is accepted and ignored, and a key Kafka does not have is an
// error naming it (here a typo of log.retention.hours).
func TestParseManagerConfigBrokerProperties(t *testing.T) {
	c, err := tiered.ParseManagerConfig(serverProperties)
	if err != nil {
		t.Fatalf("a broker's server.properties: %v", err)
	}
	if c.TaskInterval != 5*time.Second || c.CopierThreads != 4 || c.CopyBytesPerSecond != 1<<20 || c.ReaderThreads != 6 || c.ExpirationThreads != 10 {
		t.Fatalf("the remote log manager keys were not applied: %+v", c)
	}
	for _, bad := range []string{"log.retention.hour", "remote.log.reader.thread", "listners"} {
		props := map[string]string{bad: "1"}
		for k, v := range serverProperties {
			props[k] = v
		}
		var ce *backend.ConfigError
		if _, err := tiered.ParseManagerConfig(props); !errors.As(err, &ce) || ce.Key != bad {
			t.Errorf("server.properties with %q: %v; want a *backend.ConfigError naming it", bad, err)
		}
	}
	// The broker's keys are not a topic's: a topic config of listeners
	// is refused as Kafka refuses it.
	if _, err := backend.ParseConfig(map[string]string{"listeners": "PLAINTEXT://:9092"}); !errors.Is(err, backend.ErrInvalidConfig) {
		t.Fatalf("a topic config with listeners: %v", err)
	}
}
