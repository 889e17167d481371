package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tierlog/tierlog/objstore"
	"github.com/tierlog/tierlog/objstore/seal"
)

func newRekeyCmd() *cobra.Command {
	var storeURL string
	var apply, asJSON bool
	cmd := &cobra.Command{
		Use:   "rekey --store URL --key-file FILE [--apply]",
		Short: "Re-wrap a sealed bucket's keys under the key file's active key",
		Long: `rekey re-wraps every bucket key of a sealed (client-side encrypted)
bucket that is not wrapped under the key file's active key: one GET and
one compare-and-swap PUT a bucket key (a bucket has one per broker
start), no data re-uploaded. Without --apply it only says what it would
do.

To retire a key: add a new key to the key file and make it active
("active NEW"); restart the brokers (new bucket keys are wrapped under
NEW); run rekey --apply; when rekey finds nothing left under the old key
(verify --deep agrees), remove the old key from the file.

An interrupted rekey is finished by running it again: a key it
re-wrapped already is skipped. A bucket key that cannot be re-wrapped
(its key is not in the file) is reported and the others are re-wrapped;
rekey then exits 1. Bucket keys brokers make while it runs are taken
too.`,
		Example: `  tierctl rekey --store s3://bucket/tierlog --key-file /etc/tierlog/keys
  tierctl rekey --store s3://bucket/tierlog --key-file /etc/tierlog/keys --apply`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			store, err := openSealedStore(ctx, storeURL, "rekey")
			if err != nil {
				return err
			}
			defer store.Close()
			w := bufio.NewWriter(cmd.OutOrStdout())
			defer w.Flush()
			steps, err := seal.Rekey(ctx, store, seal.RekeyOptions{DryRun: !apply, OnStep: func(st seal.RekeyStep) {
				if asJSON {
					return
				}
				switch {
				case st.Err != nil:
					fmt.Fprintf(w, "%s: under %s, cannot be opened or re-wrapped: %v\n", st.Key.Name, st.From, st.Err)
				case st.From == st.To:
					fmt.Fprintf(w, "%s: under %s already\n", st.Key.Name, st.To)
				case st.Done:
					fmt.Fprintf(w, "%s: re-wrapped from %s to %s\n", st.Key.Name, st.From, st.To)
				default:
					fmt.Fprintf(w, "%s: would re-wrap from %s to %s\n", st.Key.Name, st.From, st.To)
				}
				w.Flush()
			}})
			if asJSON {
				type step struct {
					Object    string `json:"object"`
					BucketKey string `json:"bucketKey"`
					From      string `json:"from"`
					To        string `json:"to"`
					Done      bool   `json:"rewrapped"`
					Err       string `json:"error,omitempty"`
				}
				for _, st := range steps { // a JSON object a line
					js := step{Object: st.Key.Name, BucketKey: st.Key.ID, From: st.From, To: st.To, Done: st.Done}
					if st.Err != nil {
						js.Err = st.Err.Error()
					}
					writeJSON(w, js)
				}
				if errors.Is(err, seal.ErrRekeyIncomplete) {
					return errProblems
				}
				return err
			}
			if errors.Is(err, seal.ErrRekeyIncomplete) {
				fmt.Fprintf(w, "%v\n", err)
				return errProblems
			}
			if err != nil {
				return err
			}
			var left, done int
			for _, st := range steps {
				if st.Done {
					done++
				} else if st.From != st.To {
					left++
				}
			}
			switch {
			case len(steps) == 0:
				fmt.Fprintln(w, noKeys)
			case !apply && left > 0:
				fmt.Fprintf(w, "dry run: %d of %d bucket keys would be re-wrapped; pass --apply to re-wrap them\n", left, len(steps))
			case apply:
				fmt.Fprintf(w, "%d bucket keys re-wrapped; all %d are under the active key\n", done, len(steps))
			default:
				fmt.Fprintf(w, "all %d bucket keys are under the active key\n", len(steps))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&storeURL, "store", "", "the bucket URL (env TIERCTL_STORE)")
	cmd.Flags().BoolVar(&apply, "apply", false, "re-wrap (without it, a dry run)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print each step as a line of JSON")
	return cmd
}

// noKeys is what rekey and key list say of a store without bucket keys.
const noKeys = "no bucket keys in this store: nothing in it is sealed, or their objects were lost (then verify --deep names the objects that need them)"

// openSealedStore opens --store, which must be sealed: a key file given
// by --key-file, TIERCTL_KEY_FILE or the URL's key-file=.
func openSealedStore(ctx context.Context, storeURL, what string) (*objstore.Store, error) {
	store, err := openStore(ctx, storeURL)
	if err != nil {
		return nil, err
	}
	if _, err := seal.Sealed(store); err != nil {
		store.Close()
		return nil, usagef("%s needs the bucket's key file: --key-file FILE (or TIERCTL_KEY_FILE, or the URL's key-file=)", what)
	}
	return store, nil
}

func newKeyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "key",
		Short: "Make key-file keys and list a sealed bucket's keys",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "new ID",
		Short: "Print a key file line holding a new random key",
		Long: `key new prints "key ID BASE64", a new random 256-bit key-encryption key,
for a key file. A key file holds such lines and one "active ID"; keep it
readable by its owner only (chmod 600): tierlog refuses one others can
read.`,
		Example: `  umask 077; { tierctl key new 2026-12; echo "active 2026-12"; } > /etc/tierlog/keys`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			line, err := seal.NewKey(args[0])
			if err != nil {
				return usagef("%v", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), line)
			return nil
		},
	})
	var storeURL string
	var asJSON bool
	list := &cobra.Command{
		Use:   "list --store URL --key-file FILE",
		Short: "List a sealed bucket's keys and the key-file key wrapping each",
		Long: `key list lists the bucket keys' objects of a sealed bucket (one LIST
page per 1,000 objects of the store), each with the key-file key that
wraps it and whether that key is retired (not the file's active key:
rekey --apply re-wraps those). Each is opened with the key file: one it
cannot open (its key is not in the file, or another key has its id) is
said so, and key list exits 1.

A bucket key's objects are small and few (one a broker start, in each
folder it wrote to) but every object sealed under one needs it: back
them up with the key file.`,
		Example: `  tierctl key list --store s3://bucket/tierlog --key-file /etc/tierlog/keys`,
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			store, err := openSealedStore(ctx, storeURL, "key list")
			if err != nil {
				return err
			}
			defer store.Close()
			keys, err := seal.BucketKeys(ctx, store)
			if err != nil {
				return err
			}
			w := bufio.NewWriter(cmd.OutOrStdout())
			defer w.Flush()
			bad := 0
			if asJSON {
				type key struct {
					Name    string `json:"object"`
					ID      string `json:"bucketKey"`
					KEK     string `json:"wrappedBy"`
					Retired bool   `json:"retired"`
					Err     string `json:"error,omitempty"`
				}
				for _, k := range keys { // a JSON object a line
					js := key{Name: k.Name, ID: k.ID, KEK: k.KEK, Retired: k.Retired}
					if k.Err != nil {
						js.Err, bad = k.Err.Error(), bad+1
					}
					writeJSON(w, js)
				}
			} else {
				for _, k := range keys {
					state := "active"
					switch {
					case k.Err != nil:
						state, bad = fmt.Sprintf("CANNOT BE OPENED: %v; the objects sealed under it are unreadable until the key file holds the key that wraps it", k.Err), bad+1
					case k.Retired:
						state = "retired: tierctl rekey --apply re-wraps it"
					}
					kek := k.KEK
					if kek == "" {
						kek = "?"
					}
					fmt.Fprintf(w, "%s  wrapped by %s (%s)\n", k.Name, kek, state)
				}
				if len(keys) == 0 {
					fmt.Fprintln(w, noKeys)
				}
			}
			if bad > 0 {
				return errProblems
			}
			return nil
		},
	}
	list.Flags().StringVar(&storeURL, "store", "", "the bucket URL (env TIERCTL_STORE)")
	list.Flags().BoolVar(&asJSON, "json", false, "print each key as a line of JSON")
	cmd.AddCommand(list)
	return cmd
}
