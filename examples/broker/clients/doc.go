// Package clients drives the reference broker (examples/broker/broker)
// with Kafka clients other than franz-go, unpinned, as new users run
// them: IBM/sarama and segmentio/kafka-go (pure Go, from the module
// proxy), and kcat (librdkafka) where it is installed (Debian package
// kcat). Each test produces with every codec and reads the stored
// batches' codec back from the partition, reads the records back
// byte-identical, runs a consumer group through a member leaving, and
// calls the admin APIs the client has.
//
// It is a module of its own so that the tierlog module does not depend on
// those clients (examples are leaves): make test runs it with
// "cd examples/broker/clients && go test ./...".
package clients
