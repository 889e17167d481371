package backend

import (
	"sort"
	"strings"
)

// Kafka's broker properties (server.properties), so that a reader of a
// broker's properties (tiered.ParseManagerConfig) accepts every key of
// Kafka's and refuses the others by name, as ParseConfig does for topic
// configs: the one table of what Kafka has and tierlog does not act on.

// brokerOwnedKeys are Kafka topic configs the storage layer accepts and
// ignores: replication, producer-side and format-conversion settings.
// message.timestamp.difference.max.ms is Kafka 3.x's (removed in 4.0,
// whose before/after limits tierlog applies): accepted so a config
// carried over from 3.x still parses, and ignored, as Kafka 4.0 does.
// The compression levels are ignored: a recompressing leader uses each
// codec's default level.
var brokerOwnedKeys = map[string]bool{
	"compression.gzip.level": true, "compression.lz4.level": true,
	"compression.zstd.level": true, "min.insync.replicas": true, "unclean.leader.election.enable": true,
	"message.downconversion.enable": true, "message.format.version": true, "preallocate": true,
	"leader.replication.throttled.replicas": true, "follower.replication.throttled.replicas": true,
	"message.timestamp.difference.max.ms": true, "remote.log.copy.disable": true, "remote.log.delete.on.disable": true,
}

// serverKeys are the keys Kafka's broker defines (AbstractKafkaConfig's
// CONFIG_DEF, read from apache/kafka at 1eb7644, October 2024, the line
// that became 4.0; the ZooKeeper keys 4.0 dropped are kept, so a 3.x file
// still parses, as with message.timestamp.difference.max.ms), with
// remote.log.manager.follower.thread.pool.size and
// controller.quorum.auto.join.enable added since, less the broker-wide
// defaults of topic configs, which topicSynonyms names.
var serverKeys = func() map[string]bool {
	m := map[string]bool{}
	for _, k := range []string{
		"advertised.listeners", "alter.config.policy.class.name",
		"alter.log.dirs.replication.quota.window.num",
		"alter.log.dirs.replication.quota.window.size.seconds", "authorizer.class.name",
		"auto.create.topics.enable", "auto.leader.rebalance.enable", "background.threads",
		"broker.heartbeat.interval.ms", "broker.id", "broker.id.generation.enable", "broker.rack",
		"broker.session.timeout.ms", "client.quota.callback.class",
		"connection.failed.authentication.delay.ms", "connections.max.idle.ms",
		"connections.max.reauth.ms", "control.plane.listener.name", "controlled.shutdown.enable",
		"controlled.shutdown.max.retries", "controlled.shutdown.retry.backoff.ms",
		"controller.listener.names", "controller.quorum.append.linger.ms",
		"controller.quorum.auto.join.enable", "controller.quorum.bootstrap.servers",
		"controller.quorum.election.backoff.max.ms", "controller.quorum.election.timeout.ms",
		"controller.quorum.fetch.timeout.ms", "controller.quorum.request.timeout.ms",
		"controller.quorum.retry.backoff.ms", "controller.quorum.voters", "controller.quota.window.num",
		"controller.quota.window.size.seconds", "controller.socket.timeout.ms",
		"create.topic.policy.class.name", "default.replication.factor",
		"delegation.token.expiry.check.interval.ms", "delegation.token.expiry.time.ms",
		"delegation.token.max.lifetime.ms", "delegation.token.secret.key",
		"delete.records.purgatory.purge.interval.requests", "delete.topic.enable",
		"early.start.listeners", "eligible.leader.replicas.enable", "fetch.max.bytes",
		"fetch.purgatory.purge.interval.requests", "group.consumer.assignors",
		"group.consumer.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms",
		"group.consumer.max.session.timeout.ms", "group.consumer.max.size",
		"group.consumer.migration.policy", "group.consumer.min.heartbeat.interval.ms",
		"group.consumer.min.session.timeout.ms", "group.consumer.session.timeout.ms",
		"group.coordinator.append.linger.ms", "group.coordinator.new.enable",
		"group.coordinator.rebalance.protocols", "group.coordinator.threads",
		"group.initial.rebalance.delay.ms", "group.max.session.timeout.ms", "group.max.size",
		"group.min.session.timeout.ms", "group.share.delivery.count.limit", "group.share.enable",
		"group.share.heartbeat.interval.ms", "group.share.max.groups",
		"group.share.max.heartbeat.interval.ms", "group.share.max.record.lock.duration.ms",
		"group.share.max.session.timeout.ms", "group.share.max.size",
		"group.share.min.heartbeat.interval.ms", "group.share.min.record.lock.duration.ms",
		"group.share.min.session.timeout.ms", "group.share.partition.max.record.locks",
		"group.share.record.lock.duration.ms", "group.share.session.timeout.ms",
		"initial.broker.registration.timeout.ms", "inter.broker.listener.name",
		"inter.broker.protocol.version", "kafka.metrics.polling.interval.secs",
		"kafka.metrics.reporters", "leader.imbalance.check.interval.seconds",
		"leader.imbalance.per.broker.percentage", "listener.security.protocol.map", "listeners",
		"log.cleaner.backoff.ms", "log.cleaner.dedupe.buffer.size", "log.cleaner.enable",
		"log.cleaner.io.buffer.load.factor", "log.cleaner.io.buffer.size",
		"log.cleaner.io.max.bytes.per.second", "log.cleaner.threads", "log.dir",
		"log.dir.failure.timeout.ms", "log.dirs", "log.flush.offset.checkpoint.interval.ms",
		"log.flush.start.offset.checkpoint.interval.ms", "log.initial.task.delay.ms",
		"log.retention.check.interval.ms", "max.connection.creation.rate", "max.connections",
		"max.connections.per.ip", "max.connections.per.ip.overrides",
		"max.incremental.fetch.session.cache.slots", "max.request.partition.size.limit",
		"metadata.log.dir", "metadata.log.max.record.bytes.between.snapshots",
		"metadata.log.max.snapshot.interval.ms", "metadata.log.segment.bytes",
		"metadata.log.segment.min.bytes", "metadata.log.segment.ms", "metadata.max.idle.interval.ms",
		"metadata.max.retention.bytes", "metadata.max.retention.ms", "metric.reporters",
		"metrics.num.samples", "metrics.recording.level", "metrics.sample.window.ms", "node.id",
		"num.io.threads", "num.network.threads", "num.partitions", "num.recovery.threads.per.data.dir",
		"num.replica.alter.log.dirs.threads", "num.replica.fetchers", "offset.metadata.max.bytes",
		"offsets.commit.timeout.ms", "offsets.load.buffer.size", "offsets.retention.check.interval.ms",
		"offsets.retention.minutes", "offsets.topic.compression.codec", "offsets.topic.num.partitions",
		"offsets.topic.replication.factor", "offsets.topic.segment.bytes",
		"password.encoder.cipher.algorithm", "password.encoder.iterations",
		"password.encoder.key.length", "password.encoder.keyfactory.algorithm",
		"password.encoder.old.secret", "password.encoder.secret", "principal.builder.class",
		"process.roles", "producer.id.expiration.check.interval.ms", "producer.id.expiration.ms",
		"producer.purgatory.purge.interval.requests", "queued.max.request.bytes", "queued.max.requests",
		"quota.window.num", "quota.window.size.seconds", "remote.fetch.max.wait.ms",
		"remote.list.offsets.request.timeout.ms", "remote.log.index.file.cache.total.size.bytes",
		"remote.log.manager.copier.thread.pool.size", "remote.log.manager.copy.max.bytes.per.second",
		"remote.log.manager.copy.quota.window.num", "remote.log.manager.copy.quota.window.size.seconds",
		"remote.log.manager.expiration.thread.pool.size",
		"remote.log.manager.fetch.max.bytes.per.second", "remote.log.manager.fetch.quota.window.num",
		"remote.log.manager.fetch.quota.window.size.seconds",
		"remote.log.manager.follower.thread.pool.size", "remote.log.manager.task.interval.ms",
		"remote.log.manager.task.retry.backoff.max.ms", "remote.log.manager.task.retry.backoff.ms",
		"remote.log.manager.task.retry.jitter", "remote.log.manager.thread.pool.size",
		"remote.log.metadata.custom.metadata.max.bytes", "remote.log.metadata.manager.class.name",
		"remote.log.metadata.manager.class.path", "remote.log.metadata.manager.impl.prefix",
		"remote.log.metadata.manager.listener.name", "remote.log.reader.max.pending.tasks",
		"remote.log.reader.threads", "remote.log.storage.manager.class.name",
		"remote.log.storage.manager.class.path", "remote.log.storage.manager.impl.prefix",
		"remote.log.storage.system.enable", "replica.fetch.backoff.ms", "replica.fetch.max.bytes",
		"replica.fetch.min.bytes", "replica.fetch.response.max.bytes", "replica.fetch.wait.max.ms",
		"replica.high.watermark.checkpoint.interval.ms", "replica.lag.time.max.ms",
		"replica.selector.class", "replica.socket.receive.buffer.bytes", "replica.socket.timeout.ms",
		"replication.quota.window.num", "replication.quota.window.size.seconds", "request.timeout.ms",
		"reserved.broker.max.id", "sasl.client.callback.handler.class", "sasl.enabled.mechanisms",
		"sasl.jaas.config", "sasl.kerberos.kinit.cmd", "sasl.kerberos.min.time.before.relogin",
		"sasl.kerberos.principal.to.local.rules", "sasl.kerberos.service.name",
		"sasl.kerberos.ticket.renew.jitter", "sasl.kerberos.ticket.renew.window.factor",
		"sasl.login.callback.handler.class", "sasl.login.class", "sasl.login.connect.timeout.ms",
		"sasl.login.read.timeout.ms", "sasl.login.refresh.buffer.seconds",
		"sasl.login.refresh.min.period.seconds", "sasl.login.refresh.window.factor",
		"sasl.login.refresh.window.jitter", "sasl.login.retry.backoff.max.ms",
		"sasl.login.retry.backoff.ms", "sasl.mechanism.controller.protocol",
		"sasl.mechanism.inter.broker.protocol", "sasl.oauthbearer.clock.skew.seconds",
		"sasl.oauthbearer.expected.audience", "sasl.oauthbearer.expected.issuer",
		"sasl.oauthbearer.jwks.endpoint.refresh.ms",
		"sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
		"sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", "sasl.oauthbearer.jwks.endpoint.url",
		"sasl.oauthbearer.scope.claim.name", "sasl.oauthbearer.sub.claim.name",
		"sasl.oauthbearer.token.endpoint.url", "sasl.server.callback.handler.class",
		"sasl.server.max.receive.size", "security.inter.broker.protocol", "security.providers",
		"server.max.startup.time.ms", "share.coordinator.append.linger.ms",
		"share.coordinator.load.buffer.size", "share.coordinator.snapshot.update.records.per.snapshot",
		"share.coordinator.state.topic.compression.codec", "share.coordinator.state.topic.min.isr",
		"share.coordinator.state.topic.num.partitions",
		"share.coordinator.state.topic.replication.factor",
		"share.coordinator.state.topic.segment.bytes", "share.coordinator.threads",
		"share.coordinator.write.timeout.ms", "share.fetch.max.fetch.records",
		"share.fetch.purgatory.purge.interval.requests", "socket.connection.setup.timeout.max.ms",
		"socket.connection.setup.timeout.ms", "socket.listen.backlog.size",
		"socket.receive.buffer.bytes", "socket.request.max.bytes", "socket.send.buffer.bytes",
		"ssl.allow.dn.changes", "ssl.allow.san.changes", "ssl.cipher.suites", "ssl.client.auth",
		"ssl.enabled.protocols", "ssl.endpoint.identification.algorithm", "ssl.engine.factory.class",
		"ssl.key.password", "ssl.keymanager.algorithm", "ssl.keystore.certificate.chain",
		"ssl.keystore.key", "ssl.keystore.location", "ssl.keystore.password", "ssl.keystore.type",
		"ssl.principal.mapping.rules", "ssl.protocol", "ssl.provider",
		"ssl.secure.random.implementation", "ssl.trustmanager.algorithm", "ssl.truststore.certificates",
		"ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.type",
		"telemetry.max.bytes", "transaction.abort.timed.out.transaction.cleanup.interval.ms",
		"transaction.max.timeout.ms", "transaction.partition.verification.enable",
		"transaction.remove.expired.transaction.cleanup.interval.ms",
		"transaction.state.log.load.buffer.size", "transaction.state.log.min.isr",
		"transaction.state.log.num.partitions", "transaction.state.log.replication.factor",
		"transaction.state.log.segment.bytes", "transactional.id.expiration.ms",
		"unclean.leader.election.interval.ms", "unstable.api.versions.enable",
		"unstable.feature.versions.enable", "zookeeper.clientCnxnSocket", "zookeeper.connect",
		"zookeeper.connection.timeout.ms", "zookeeper.max.in.flight.requests",
		"zookeeper.metadata.migration.enable", "zookeeper.metadata.migration.min.batch.size",
		"zookeeper.session.timeout.ms", "zookeeper.set.acl", "zookeeper.ssl.cipher.suites",
		"zookeeper.ssl.client.enable", "zookeeper.ssl.crl.enable", "zookeeper.ssl.enabled.protocols",
		"zookeeper.ssl.endpoint.identification.algorithm", "zookeeper.ssl.keystore.location",
		"zookeeper.ssl.keystore.password", "zookeeper.ssl.keystore.type", "zookeeper.ssl.ocsp.enable",
		"zookeeper.ssl.protocol", "zookeeper.ssl.truststore.location",
		"zookeeper.ssl.truststore.password", "zookeeper.ssl.truststore.type",
	} {
		m[k] = true
	}
	return m
}()

// topicSynonyms are the broker-wide defaults of topic configs (Kafka's
// ServerTopicConfigSynonyms): a broker's log.retention.hours is the
// default of every topic's retention.ms. Every topic key ParseConfig
// knows, acted on or broker-owned, is here when Kafka's broker has one.
var topicSynonyms = map[string][]string{
	"segment.bytes":                       {"log.segment.bytes"},
	"segment.ms":                          {"log.roll.ms", "log.roll.hours"},
	"segment.jitter.ms":                   {"log.roll.jitter.ms", "log.roll.jitter.hours"},
	"segment.index.bytes":                 {"log.index.size.max.bytes"},
	"flush.messages":                      {"log.flush.interval.messages"},
	"flush.ms":                            {"log.flush.interval.ms", "log.flush.scheduler.interval.ms"},
	"retention.bytes":                     {"log.retention.bytes"},
	"retention.ms":                        {"log.retention.ms", "log.retention.minutes", "log.retention.hours"},
	"max.message.bytes":                   {"message.max.bytes"},
	"index.interval.bytes":                {"log.index.interval.bytes"},
	"delete.retention.ms":                 {"log.cleaner.delete.retention.ms"},
	"min.compaction.lag.ms":               {"log.cleaner.min.compaction.lag.ms"},
	"max.compaction.lag.ms":               {"log.cleaner.max.compaction.lag.ms"},
	"file.delete.delay.ms":                {"log.segment.delete.delay.ms"},
	"min.cleanable.dirty.ratio":           {"log.cleaner.min.cleanable.ratio"},
	"cleanup.policy":                      {"log.cleanup.policy"},
	"unclean.leader.election.enable":      {"unclean.leader.election.enable"},
	"min.insync.replicas":                 {"min.insync.replicas"},
	"compression.type":                    {"compression.type"},
	"compression.gzip.level":              {"compression.gzip.level"},
	"compression.lz4.level":               {"compression.lz4.level"},
	"compression.zstd.level":              {"compression.zstd.level"},
	"preallocate":                         {"log.preallocate"},
	"message.format.version":              {"log.message.format.version"},
	"message.timestamp.type":              {"log.message.timestamp.type"},
	"message.timestamp.difference.max.ms": {"log.message.timestamp.difference.max.ms"},
	"message.timestamp.before.max.ms":     {"log.message.timestamp.before.max.ms"},
	"message.timestamp.after.max.ms":      {"log.message.timestamp.after.max.ms"},
	"message.downconversion.enable":       {"log.message.downconversion.enable"},
	"local.retention.ms":                  {"log.local.retention.ms"},
	"local.retention.bytes":               {"log.local.retention.bytes"},
}

// The prefixes under which Kafka's broker passes keys on: a listener's
// own settings (listener.name.<listener>.<key>) and, by default, the
// remote storage plugins' (remote.log.storage.manager.impl.prefix,
// remote.log.metadata.manager.impl.prefix; a broker's properties may set
// others, which CheckBrokerProperties reads).
const listenerPrefix = "listener.name."

var pluginPrefixKeys = map[string]string{
	"remote.log.storage.manager.impl.prefix":  "rsm.config.",
	"remote.log.metadata.manager.impl.prefix": "rlmm.config.",
}

// IsBrokerKey reports whether name is one of Kafka's broker properties:
// a key the broker defines, the broker-wide default of a topic config
// (log.segment.bytes, …), or a listener's own setting
// (listener.name.<listener>.…). Keys under the remote storage plugins'
// prefixes depend on the properties; see CheckBrokerProperties.
func IsBrokerKey(name string) bool {
	if serverKeys[name] || strings.HasPrefix(name, listenerPrefix) {
		return true
	}
	for _, s := range topicSynonyms {
		for _, k := range s {
			if k == name {
				return true
			}
		}
	}
	return false
}

// CheckBrokerProperties checks a broker's properties: every key MUST be
// one acts says the caller applies, one of Kafka's (IsBrokerKey), or
// under a remote storage plugin's prefix (rsm.config. and rlmm.config.
// unless props sets others). It returns a *ConfigError naming the first
// other key, in sorted order, or nil.
func CheckBrokerProperties(props map[string]string, acts func(key string) bool) error {
	var prefixes []string
	for k, def := range pluginPrefixKeys {
		if v, ok := props[k]; ok && v != "" {
			def = v
		}
		prefixes = append(prefixes, def)
	}
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
next:
	for _, k := range keys {
		if acts(k) || IsBrokerKey(k) {
			continue
		}
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				continue next
			}
		}
		return &ConfigError{Key: k, Value: props[k], Reason: "not one of Kafka's broker properties"}
	}
	return nil
}
