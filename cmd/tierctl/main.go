// Command tierctl is tierlog's operator tool: it dumps and verifies Kafka
// log segments and indexes, and runs the end-to-end demo.
//
// Exit codes: 0 when everything is fine, 1 when a command found problems
// (a corrupt batch, an index entry that disagrees with its log), 2 on usage
// errors (an unknown flag, a missing argument, a file that cannot be read).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	// The drivers of the s3:// and minio:// store URLs.
	_ "github.com/tierlog/tierlog/objstore/minio"
	_ "github.com/tierlog/tierlog/objstore/s3"
)

// Exit codes.
const (
	exitOK       = 0
	exitProblems = 1
	exitUsage    = 2
)

var (
	// errProblems is returned by a command that ran to the end and
	// reported problems; main maps it to exit code 1 without printing it
	// again.
	errProblems = errors.New("problems found")
	// errEmptyBucket is returned when a command that lists the bucket's
	// partitions (verify --store, cost) finds none: a wrong URL is
	// likelier than an empty bucket, and nothing checked must not read as
	// nothing wrong.
	errEmptyBucket = errors.New("no partition has a manifest")
)

// usageError marks errors caused by how the command was called.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes tierctl with args and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	// Ctrl-C or SIGTERM cancels the command's context: uploads and
	// cleaning stop at their next step, leaving nothing half-committed.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errProblems):
		return exitProblems
	default:
		fmt.Fprintf(stderr, "tierctl: %v\n", err)
		return exitUsage
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "tierctl",
		Short: "Inspect and operate tierlog (Kafka-compatible) log directories",
		Long: `tierctl inspects and operates tierlog partitions, whose files are
byte-compatible with Apache Kafka's log directories.

Settings come from flags, then TIERCTL_<FLAG> environment variables
(TIERCTL_STORE, TIERCTL_LOG_LEVEL; TIERCTL_CONFIG=k=v,k=v for --config),
then a Kafka-style .properties file given by --config-file or
TIERCTL_CONFIG_FILE, whose keys are flag names (store=…) or topic config
keys (segment.bytes=…).

A partition is named TOPIC-PARTITION everywhere, as its directory is:
--partition orders-0, or a PARTITION_DIR path ending in it (logs/orders-0).

Bucket URLs (--store): file:///dir, s3://bucket/prefix?region=…,
minio://bucket/prefix?endpoint=…; a sealed (client-side encrypted)
bucket takes its key file, --key-file or the URL's key-file= option.
Every command but demo refuses mem://:
an in-memory bucket would start empty and vanish, with what was written to
it, when the command exits.

Exit codes: 0 ok, 1 problems found, 2 usage or I/O error.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if err := applySettings(cmd); err != nil {
				return err
			}
			if err := checkProgressFlag(cmd); err != nil {
				return err
			}
			level, _ := cmd.Flags().GetString("log-level")
			l, err := newLogger(cmd.ErrOrStderr(), level)
			if err != nil {
				return err
			}
			opts, err := commandStoreOptions(cmd)
			if err != nil {
				return err
			}
			ctx := context.WithValue(cmd.Context(), loggerKey{}, l)
			ctx = context.WithValue(ctx, keyFileKey{}, commandKeyFile(cmd))
			cmd.SetContext(context.WithValue(ctx, storeOptionsKey{}, opts))
			return nil
		},
	}
	root.PersistentFlags().String("config-file", "", "a .properties file of settings: flag names and topic config keys (env TIERCTL_CONFIG_FILE)")
	root.PersistentFlags().String("progress", "auto", "progress bars on stderr for long work: auto (when stderr is a terminal), always or never")
	root.PersistentFlags().String("log-level", "warn", "structured log lines on stderr at or above this level: debug, info, warn, error or off")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newDumpCmd(), newVerifyCmd(), newProduceCmd(), newConsumeCmd(), newLookupCmd(),
		newCompactCmd(), newOffloadCmd(), newLsCmd(), newManifestCmd(), newRestoreCmd(), newGCCmd(), newWALCmd(), newCostCmd(), newDemoCmd(),
		newRekeyCmd(), newKeyCmd())
	addStoreDeadlineFlags(root)
	root.InitDefaultCompletionCmd()
	requireSubcommands(root)
	return root
}

// requireSubcommands makes a command that only groups others (manifest,
// completion) fail with a usage error, exit 2, when called without one of
// them or with an unknown one; cobra would print its help and exit 0.
func requireSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		requireSubcommands(sub)
	}
	if c == c.Root() || !c.HasSubCommands() || c.Runnable() {
		return
	}
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(cmd *cobra.Command, args []string) error {
		var names []string
		for _, s := range cmd.Commands() {
			if s.IsAvailableCommand() {
				names = append(names, s.Name())
			}
		}
		if len(args) == 0 {
			return usagef("%s needs a subcommand: %s; see '%s --help'", cmd.CommandPath(), strings.Join(names, ", "), cmd.CommandPath())
		}
		return usagef("%s: unknown command %q (want %s); see '%s --help'", cmd.CommandPath(), args[0], strings.Join(names, ", "), cmd.CommandPath())
	}
}

// exactArgs is cobra.ExactArgs with a usage error.
func minArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return usagef("%s needs at least %d argument(s); see '%s --help'", cmd.CommandPath(), n, cmd.CommandPath())
		}
		return nil
	}
}

func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s takes %d argument(s), got %d; see '%s --help'", cmd.CommandPath(), n, len(args), cmd.CommandPath())
		}
		return nil
	}
}
