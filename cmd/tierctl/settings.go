package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/magiconair/properties"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tierlog/tierlog/backend"
	"github.com/tierlog/tierlog/objstore"
)

// Settings come from three places, the first that has one winning:
//
//  1. the command line (--store URL, --config segment.bytes=1048576);
//  2. the environment: TIERCTL_<FLAG>, the flag's name in upper case with
//     dashes as underscores (TIERCTL_STORE, TIERCTL_LOG_LEVEL); for the
//     repeatable --config, TIERCTL_CONFIG holds key=value pairs separated
//     by commas;
//  3. a Kafka-style .properties file named by --config-file (or
//     TIERCTL_CONFIG_FILE): a key that is a tierctl flag's name sets that
//     flag (store=s3://…); a key Kafka's topic config knows
//     (segment.bytes=…) goes to --config, under any given on the command
//     line. Any other key is an error that names it and the file.
//
// One file serves every command: a key whose flag a command does not have
// is ignored by that command.
const envPrefix = "TIERCTL_"

// envName is the environment variable for a flag.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applySettings fills cmd's flags that the command line left unset from
// the environment, then from the config file.
func applySettings(cmd *cobra.Command) error {
	file := map[string]string{}
	var topicKeys []string
	path, _ := cmd.Flags().GetString("config-file")
	if !cmd.Flags().Changed("config-file") {
		if v, ok := os.LookupEnv(envName("config-file")); ok {
			path = v
		}
	}
	if path != "" {
		var err error
		if file, topicKeys, err = loadConfigFile(cmd.Root(), path); err != nil {
			return err
		}
	}
	var errs []error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "help" || f.Name == "config-file" {
			return
		}
		if f.Name == "config" {
			errs = append(errs, applyTopicConfig(f, file, topicKeys))
			return
		}
		if v, ok := os.LookupEnv(envName(f.Name)); ok {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, usagef("%s=%q: %v", envName(f.Name), v, err))
			}
			return
		}
		if v, ok := file[f.Name]; ok {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, usagef("%s: %s=%q: %v", path, f.Name, v, err))
			}
		}
	})
	return errors.Join(errs...)
}

// applyTopicConfig puts the file's topic config keys, then TIERCTL_CONFIG's
// pairs, under whatever --config flags the command line gave.
func applyTopicConfig(f *pflag.Flag, file map[string]string, topicKeys []string) error {
	sv, ok := f.Value.(pflag.SliceValue)
	if !ok {
		return nil
	}
	var kvs []string
	for _, k := range topicKeys {
		kvs = append(kvs, k+"="+file[k])
	}
	if v, ok := os.LookupEnv(envName("config")); ok && v != "" {
		for kv := range strings.SplitSeq(v, ",") {
			if _, _, ok := strings.Cut(kv, "="); !ok {
				return usagef("%s: %q is not key=value", envName("config"), kv)
			}
			kvs = append(kvs, strings.TrimSpace(kv))
		}
	}
	if len(kvs) == 0 {
		return nil
	}
	return sv.Replace(append(kvs, sv.GetSlice()...))
}

// loadConfigFile reads a .properties file: it returns the keys that name a
// tierctl flag (of any command) and, separately, those of Kafka's topic
// config, sorted. A key that is neither is an error.
func loadConfigFile(root *cobra.Command, path string) (map[string]string, []string, error) {
	l := properties.Loader{Encoding: properties.UTF8, DisableExpansion: true}
	p, err := l.LoadFile(path)
	if err != nil {
		return nil, nil, usagef("--config-file: %v", err)
	}
	flags := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) { flags[f.Name] = true })
		c.PersistentFlags().VisitAll(func(f *pflag.Flag) { flags[f.Name] = true })
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	out := map[string]string{}
	var topic, unknown []string
	for _, k := range p.Keys() {
		v, _ := p.Get(k)
		out[k] = v
		switch {
		case k == "config" || k == "config-file":
			unknown = append(unknown, k) // topic configs go in as their own keys
		case flags[k]:
		case backend.IsConfigKey(k):
			topic = append(topic, k)
		default:
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, nil, usagef("%s: unknown key(s) %s: neither a tierctl flag nor a topic config key", path, strings.Join(unknown, ", "))
	}
	sort.Strings(topic)
	return out, topic, nil
}

// newLogger returns the slog logger for --log-level, writing text lines
// to w (stderr).
func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	switch strings.ToLower(level) {
	case "off", "none":
		return slog.New(slog.DiscardHandler), nil
	default:
		if err := l.UnmarshalText([]byte(level)); err != nil {
			return nil, usagef("--log-level %q: want debug, info, warn, error or off", level)
		}
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// loggerFrom returns the command's logger, which the root command puts in
// its context before the command runs.
func loggerFrom(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok {
		return l
	}
	return slog.New(slog.DiscardHandler)
}

type loggerKey struct{}

// An operator at a terminal should not wait two and a half minutes for a
// store that never answers, as a Backend's defaults would have it (5
// attempts of 30 s: objstore.Options.Bound, 151.5 s). Every command with
// --store has --store-deadline instead, the longest one request to the
// store may take, retries included: storeAttempts attempts, whose
// timeouts and the wait between them add up to at most the deadline.
// The URL's timeout= and attempts=, when given, replace what it sets.
const (
	defaultStoreDeadline = 30 * time.Second
	minStoreDeadline     = time.Second
	storeAttempts        = 2
)

// addStoreDeadlineFlags gives every command under c that has a --store
// flag a --store-deadline flag.
func addStoreDeadlineFlags(c *cobra.Command) {
	for _, sub := range c.Commands() {
		addStoreDeadlineFlags(sub)
	}
	if c.Flags().Lookup("store") != nil {
		c.Flags().Duration("store-deadline", defaultStoreDeadline,
			"give up on a request to --store after this long, retries included (2 attempts); the URL's timeout= and attempts= replace it")
		c.Flags().String("key-file", "",
			"the key file of a sealed (client-side encrypted) bucket: the URL's key-file= option (env TIERCTL_KEY_FILE); add seal=topics to the URL where only some topics are sealed")
	}
}

// storeOptions returns the store options for a --store-deadline:
// storeAttempts attempts, each of the same timeout, whose sum with the
// waits between them (objstore.Options.Bound) is at most deadline.
func storeOptions(deadline time.Duration) (objstore.Options, error) {
	if deadline < minStoreDeadline {
		return objstore.Options{}, usagef("--store-deadline %v: want at least %v", deadline, minStoreDeadline)
	}
	o := objstore.Options{MaxAttempts: storeAttempts, Timeout: time.Nanosecond}
	waits := o.Bound() - storeAttempts*o.Timeout
	o.Timeout = (deadline - waits) / storeAttempts
	return o, nil
}

// commandStoreOptions returns the store options of cmd's --store-deadline,
// for the root command to put in the command's context.
func commandStoreOptions(cmd *cobra.Command) (objstore.Options, error) {
	d := defaultStoreDeadline
	if cmd.Flags().Lookup("store-deadline") != nil {
		d, _ = cmd.Flags().GetDuration("store-deadline")
	}
	return storeOptions(d)
}

// commandKeyFile returns --key-file ("" for a command without one).
func commandKeyFile(cmd *cobra.Command) string {
	if cmd.Flags().Lookup("key-file") == nil {
		return ""
	}
	v, _ := cmd.Flags().GetString("key-file")
	return v
}

// keyFileFrom returns the --key-file the root command put in ctx.
func keyFileFrom(ctx context.Context) string {
	v, _ := ctx.Value(keyFileKey{}).(string)
	return v
}

type keyFileKey struct{}

// storeOptionsFrom returns the store options the root command put in
// ctx: those of --store-deadline.
func storeOptionsFrom(ctx context.Context) objstore.Options {
	if o, ok := ctx.Value(storeOptionsKey{}).(objstore.Options); ok {
		return o
	}
	o, _ := storeOptions(defaultStoreDeadline)
	return o
}

type storeOptionsKey struct{}
