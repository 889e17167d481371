package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sync"

	"github.com/tierlog/tierlog/vfs"
)

// The broker's own files, each a JSON document written whole (tmp, fsync,
// rename, fsync the directory; vfs.WriteFileAtomic).
const (
	topicsFile = "topics.json"
	txnFile    = "transactions.json"
)

// topicState is a topic as topics.json keeps it.
type topicState struct {
	Partitions int32             `json:"partitions"`
	Config     map[string]string `json:"config,omitempty"`
	// LeaderEpoch is the leader epoch the broker leads the topic's
	// partitions at since its last start (see the package doc).
	LeaderEpoch int32 `json:"leader_epoch"`
}

// stateFile keeps topics.json.
type stateFile struct {
	dir string
	mu  sync.Mutex
	// guarded by mu
	t map[string]topicState
}

func openState(dir string) (*stateFile, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	s := &stateFile{dir: dir, t: map[string]topicState{}}
	if err := readJSON(filepath.Join(dir, topicsFile), &s.t); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *stateFile) topics() map[string]topicState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.t)
}

func (s *stateFile) putTopic(name string, t topicState) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.t[name] = t
	return writeJSON(s.dir, topicsFile, s.t)
}

// setEpochs records the topics' leader epochs, in one write.
func (s *stateFile) setEpochs(epochs map[string]int32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, e := range epochs {
		t := s.t[name]
		t.LeaderEpoch = e
		s.t[name] = t
	}
	return writeJSON(s.dir, topicsFile, s.t)
}

// setConfig records a topic's config overrides.
func (s *stateFile) setConfig(name string, cfg map[string]string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.t[name]
	if !ok {
		return fmt.Errorf("broker: %s: topic %s: %w", topicsFile, name, fs.ErrNotExist)
	}
	t.Config = cfg
	s.t[name] = t
	return writeJSON(s.dir, topicsFile, s.t)
}

func (s *stateFile) deleteTopic(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.t, name)
	return writeJSON(s.dir, topicsFile, s.t)
}

// readJSON reads path into v; a missing file leaves v as it is.
func readJSON(path string, v any) error {
	data, err := vfs.ReadFile(vfs.Default, path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("broker: %s: %w", path, err)
	}
	return nil
}

func writeJSON(dir, name string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("broker: %s: %w", name, err)
	}
	if err := vfs.WriteFileAtomic(vfs.Default, dir, name, data); err != nil {
		return fmt.Errorf("broker: write %s: %w", name, err)
	}
	return nil
}
