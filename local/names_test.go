package local

import "testing"

func TestFileNames(t *testing.T) {
	if got := FileName(155, LogSuffix); got != "00000000000000000155.log" {
		t.Fatalf("FileName = %q", got)
	}
	for name, want := range map[string]struct {
		base   int64
		suffix string
		ok     bool
	}{
		"00000000000000000155.log":        {155, ".log", true},
		"00000000000000000000.index.swap": {0, ".index.swap", true},
		"09223372036854775807.timeindex":  {9223372036854775807, ".timeindex", true},
		"155.log":                         {ok: false},
		"0000000000000000015a.log":        {ok: false},
		"00000000000000000155":            {ok: false},
		"leader-epoch-checkpoint":         {ok: false},
		"99999999999999999999.log":        {ok: false},
		"-0000000000000000001.log":        {ok: false},
	} {
		base, suffix, err := ParseFileName(name)
		if (err == nil) != want.ok || (want.ok && (base != want.base || suffix != want.suffix)) {
			t.Errorf("ParseFileName(%q) = %d, %q, %v", name, base, suffix, err)
		}
	}
}
