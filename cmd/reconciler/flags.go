package main

import "flag"

// parseInterspersed parses args with fs and returns the positional
// arguments, which may stand before, between or after the flags
// (`send-fixture NAME --url …`, `ledger show --tenant t KEY`); the
// standard flag package stops at the first one.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			return pos, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
}
