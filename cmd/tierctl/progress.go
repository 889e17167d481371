package main

import (
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// progress is a bar on stderr for long work (produce, verify, compact,
// offload, restore). --progress auto (the default) draws it only when
// stderr is a terminal, so scripts and logs never see one; always and
// never force the choice. A nil *progress is valid and draws nothing.
type progress struct {
	mu  sync.Mutex // Add is called from upload goroutines
	bar *progressbar.ProgressBar
}

// newProgress returns a bar for total units (bytes when bytes is true) or
// nil when no bar should be drawn.
func newProgress(cmd *cobra.Command, total int64, description string, bytes bool) *progress {
	mode, _ := cmd.Flags().GetString("progress")
	w := cmd.ErrOrStderr()
	switch mode {
	case "never":
		return nil
	case "always":
	default:
		f, ok := w.(*os.File)
		if !ok || !term.IsTerminal(int(f.Fd())) {
			return nil
		}
	}
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(description),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionOnCompletion(func() { io.WriteString(w, "\n") }),
	}
	if bytes {
		opts = append(opts, progressbar.OptionShowBytes(true))
	}
	return &progress{bar: progressbar.NewOptions64(total, opts...)}
}

// Add advances the bar by n.
func (p *progress) Add(n int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bar.Add64(n)
}

// Finish fills the bar and ends its line.
func (p *progress) Finish() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bar.Finish()
}

// checkProgressFlag validates --progress.
func checkProgressFlag(cmd *cobra.Command) error {
	switch mode, _ := cmd.Flags().GetString("progress"); mode {
	case "auto", "always", "never":
		return nil
	default:
		return usagef("--progress %q: want auto, always or never", mode)
	}
}
