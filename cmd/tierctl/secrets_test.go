package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// deniedServer answers the bucket check (HEAD of the bucket) with 200 and
// every other request with S3's AccessDenied, at once: a command gets past
// opening its store and fails on its first request, naming the store.
func deniedServer(t *testing.T, bucket string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead && strings.Trim(r.URL.Path, "/") == bucket {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>`)
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// secretURL is a store URL holding secrets, and the secrets it holds.
type secretURL struct {
	name    string
	raw     string
	secrets []string
}

// secretStoreURLs returns a URL with secrets in each place a store URL can
// hold them, all pointing at addr, and the one URL without any (whose
// secrets come from the environment). Every secret starts with "Sekrit" so
// that a secret printed cut or re-escaped is still found.
func secretStoreURLs(addr string) []secretURL {
	ep := "http://" + addr
	opts := "&region=us-east-1&path-style=true&timeout=300ms&attempts=2"
	return []secretURL{
		{"clean", "s3://bkt/tl?endpoint=" + ep + opts, nil},
		{"user info", "s3://AKIASekritUser1:SekritPass1@bkt/tl?endpoint=" + ep + opts, []string{"SekritUser1", "SekritPass1"}},
		{"user alone", "s3://SekritUser2@bkt/tl?endpoint=" + ep + opts, []string{"SekritUser2"}},
		{"password with a bad escape", "s3://AKIA:SekritPass3%zz@bkt/tl?endpoint=" + ep + opts, []string{"SekritPass3"}},
		{"password with a control byte", "s3://AKIA:SekritPass4\x01@bkt/tl", []string{"SekritPass4"}},
		{"host with a space", "s3://AKIA:SekritPass5@bk t/tl", []string{"SekritPass5"}},
		{"password without an @", "s3://AKIA:SekritPort24/bkt/tl", []string{"SekritPort24"}},
		{"opaque", "s3:AKIA:SekritOpaque6@bkt", []string{"SekritOpaque6"}},
		{"endpoint user info (s3)", "s3://bkt/tl?endpoint=http://epuser:SekritEndpoint7@" + addr + opts, []string{"SekritEndpoint7"}},
		{"endpoint user info (minio)", "minio://bkt/tl?endpoint=http://epuser:SekritEndpoint8@" + addr + "&region=us-east-1", []string{"SekritEndpoint8"}},
		{"endpoint escaped", "s3://bkt/tl?endpoint=" + url.QueryEscape("http://epuser:SekritEndpoint9@"+addr) + opts, []string{"SekritEndpoint9"}},
		{"endpoint with a bad escape", "minio://bkt/tl?endpoint=http://epuser:SekritEndpoint10%zz@" + addr, []string{"SekritEndpoint10"}},
		{"endpoint query", "s3://bkt/tl?endpoint=" + url.QueryEscape(ep+"/?X-Amz-Security-Token=SekritEpQuery11") + opts, []string{"SekritEpQuery11"}},
		{"endpoint fragment", "s3://bkt/tl?endpoint=" + url.QueryEscape(ep+"#SekritEpFrag12") + opts, []string{"SekritEpFrag12"}},
		{"secret options", "s3://bkt/tl?endpoint=" + ep + opts + "&secret_key=SekritQ13&session_token=SekritQ14&access_key=SekritQ15" +
			"&secret=SekritQ16&password=SekritQ17&token=SekritQ18&aws_secret_access_key=SekritQ19",
			[]string{"SekritQ13", "SekritQ14", "SekritQ15", "SekritQ16", "SekritQ17", "SekritQ18", "SekritQ19"}},
		{"an option named by its secret", "s3://bkt/tl?endpoint=" + ep + opts + "&SekritKeyOnly20", []string{"SekritKeyOnly20"}},
		{"fragment", "s3://bkt/tl?endpoint=" + ep + opts + "#SekritFragment21", []string{"SekritFragment21"}},
		{"file user info", "file://user:SekritFile22@/tmp/tierlog-no-such-bucket", []string{"SekritFile22"}},
		{"mem user info", "mem://user:SekritMem23@x", []string{"SekritMem23"}},
	}
}

// envSecrets are the credentials every run has in its environment.
var envSecrets = []string{"AWS_ACCESS_KEY_ID=AKIASekritEnvId", "AWS_SECRET_ACCESS_KEY=SekritEnvSecret", "AWS_SESSION_TOKEN=SekritEnvToken"}

// sekrit finds any secret of secretStoreURLs and envSecrets, whole or cut.
var sekrit = regexp.MustCompile(`(?i)sekrit`)

// TestNoSecretInAnyOutput runs every tierctl command, as the built binary,
// with debug logging and --json where the command has it, once for each
// URL of secretStoreURLs, handing the URL over by --store, TIERCTL_STORE
// or a config file in turn (commands without --store get it from the
// environment and the file, which they ignore), with credentials in the
// environment too. No stdout or stderr may hold a secret, and every
// failure must still say something. It fails if a command is added
// without a case here.
func TestNoSecretInAnyOutput(t *testing.T) {
	tierctlBinary(t)
	addr := deniedServer(t, "bkt")
	root := t.TempDir()
	logs := filepath.Join(root, "logs")
	part := filepath.Join(logs, "orders-0")
	if inv := binRun(t, nil, "produce", logs, "--partition", "orders-0", "--count", "3000", "--config", "segment.bytes=65536"); inv.code != 0 {
		t.Fatalf("produce: exit %d\n%s", inv.code, inv.stderr)
	}
	if inv := binRun(t, nil, "produce", logs, "--partition", "users-0", "--count", "3000", "--key-space", "10", "--config", "segment.bytes=65536"); inv.code != 0 {
		t.Fatalf("produce: exit %d\n%s", inv.code, inv.stderr)
	}
	seg := filepath.Join(part, "00000000000000000000.log")
	// The arguments of each command, without --store.
	cases := map[string]func() []string{
		"dump": func() []string { return []string{"dump", seg} },
		"produce": func() []string {
			return []string{"produce", filepath.Join(t.TempDir(), "logs"), "--partition", "p-0", "--count", "10"}
		},
		"compact": func() []string {
			return []string{"compact", filepath.Join(logs, "users-0"), "--config", "cleanup.policy=compact"}
		},
		"completion bash": func() []string { return []string{"completion", "bash"} },
		"completion zsh":  func() []string { return []string{"completion", "zsh"} },
		"completion fish": func() []string { return []string{"completion", "fish"} },
		"completion powershell": func() []string {
			return []string{"completion", "powershell"}
		},
		"offload":         func() []string { return []string{"offload", part} },
		"ls":              func() []string { return []string{"ls", part} },
		"consume":         func() []string { return []string{"consume", part, "--count", "1"} },
		"lookup":          func() []string { return []string{"lookup", part, "--offset", "0"} },
		"verify":          func() []string { return []string{"verify", logs} },
		"manifest show":   func() []string { return []string{"manifest", "show", "--partition", "orders-0"} },
		"manifest verify": func() []string { return []string{"manifest", "verify", "--partition", "orders-0"} },
		"manifest accept": func() []string { return []string{"manifest", "accept", part, "--dry-run"} },
		"restore": func() []string {
			return []string{"restore", filepath.Join(t.TempDir(), "restored"), "--partition", "orders-0"}
		},
		"gc":         func() []string { return []string{"gc", "--partition", "orders-0"} },
		"wal ls":     func() []string { return []string{"wal", "ls"} },
		"wal verify": func() []string { return []string{"wal", "verify", "--deep"} },
		"wal gc":     func() []string { return []string{"wal", "gc"} },
		"cost":       func() []string { return []string{"cost"} },
		"demo":       func() []string { return []string{"demo", "--records", "1000"} },
		"rekey":      func() []string { return []string{"rekey", "--key-file", keyFile(t)} },
		"key list":   func() []string { return []string{"key", "list", "--key-file", keyFile(t)} },
		"key new":    func() []string { return []string{"key", "new", "k1"} },
	}
	rootCmd := newRootCmd()
	all := leafCommands(rootCmd, "")
	sort.Strings(all)
	urls := secretStoreURLs(addr)
	runs := 0
	for k, c := range all {
		argsOf, ok := cases[c]
		if !ok {
			t.Errorf("command %q has no case in this test", c)
			continue
		}
		sub, _, err := rootCmd.Find(strings.Fields(c))
		if err != nil {
			t.Fatal(err)
		}
		hasStore := sub.Flags().Lookup("store") != nil
		for i, u := range urls {
			args := argsOf()
			if sub.Flags().Lookup("json") != nil {
				args = append(args, "--json")
			}
			env := append([]string{"TIERCTL_LOG_LEVEL=debug"}, envSecrets...)
			how := "--store"
			switch {
			case !hasStore && i%2 == 0, hasStore && (i+k)%3 == 1:
				how = "TIERCTL_STORE"
				env = append(env, "TIERCTL_STORE="+u.raw)
			case !hasStore, (i+k)%3 == 2:
				how = "--config-file"
				file := filepath.Join(t.TempDir(), "tierctl.properties")
				if err := os.WriteFile(file, []byte("store="+u.raw+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--config-file", file)
			default:
				args = append(args, "--store", u.raw)
			}
			inv := binRun(t, env, args...)
			runs++
			out := inv.stdout + inv.stderr
			if sekrit.MatchString(out) {
				t.Errorf("tierctl %s, URL with %s by %s, printed a secret (exit %d)\nstdout: %s\nstderr: %s",
					c, u.name, how, inv.code, inv.stdout, inv.stderr)
			}
			if inv.code != 0 && strings.TrimSpace(inv.stderr) == "" {
				t.Errorf("tierctl %s, URL with %s by %s: exit %d without a word", c, u.name, how, inv.code)
			}
			if hasStore && inv.code == 0 {
				t.Errorf("tierctl %s, URL with %s by %s: exit 0 from a store that refuses everything", c, u.name, how)
			}
		}
	}
	t.Logf("%d runs of %d commands over %d URLs", runs, len(all), len(urls))
}
