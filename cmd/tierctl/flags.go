package main

import (
	"fmt"
	"strconv"
)

// offsetValue is a flag holding an offset or a timestamp: a number >= 0.
// A negative one is refused when the flag is parsed, so the error names
// the flag and the value ("invalid argument "-5" for "--from" flag: …"),
// from the command line, the environment or a config file alike; set
// tells a given value from the default, which each command documents
// (consume --from: the log start).
type offsetValue struct {
	v    int64
	set  bool
	unit string // for help: "offset", "ms"
}

func (o *offsetValue) Set(s string) error {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("want a whole number >= 0: %w", err)
	}
	if v < 0 {
		return fmt.Errorf("%d is negative: want %s >= 0", v, o.what())
	}
	o.v, o.set = v, true
	return nil
}

func (o *offsetValue) String() string {
	if !o.set {
		return ""
	}
	return strconv.FormatInt(o.v, 10)
}

func (o *offsetValue) Type() string { return o.unit }

func (o *offsetValue) what() string {
	if o.unit == "ms" {
		return "a timestamp in ms since the epoch"
	}
	return "an offset"
}
