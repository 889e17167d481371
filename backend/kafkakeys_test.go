package backend

import "testing"

// TestTopicSynonymsCoverTopicKeys: every topic config ParseConfig knows
// (acted on or broker-owned) has its broker-wide default in topicSynonyms,
// or is one Kafka's broker has none of; every synonym names a topic key
// ParseConfig knows. A topic key added to one table and not the other
// fails here.
func TestTopicSynonymsCoverTopicKeys(t *testing.T) {
	noBrokerDefault := map[string]bool{
		"remote.storage.enable": true, "diskless.enable": true, "remote.storage.seal.enable": true, "leader.replication.throttled.replicas": true,
		"follower.replication.throttled.replicas": true, "remote.log.copy.disable": true, "remote.log.delete.on.disable": true,
	}
	for _, k := range ConfigKeys() {
		if _, ok := topicSynonyms[k.Name]; !ok && !noBrokerDefault[k.Name] {
			t.Errorf("topic key %s has no broker-wide default in topicSynonyms", k.Name)
		}
	}
	for k := range brokerOwnedKeys {
		if _, ok := topicSynonyms[k]; !ok && !noBrokerDefault[k] {
			t.Errorf("broker-owned topic key %s has no broker-wide default in topicSynonyms", k)
		}
	}
	for k := range topicSynonyms {
		if !IsConfigKey(k) {
			t.Errorf("topicSynonyms names %s, a topic key ParseConfig refuses", k)
		}
	}
}
