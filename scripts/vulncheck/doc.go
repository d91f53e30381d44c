// Command vulncheck is the gate of `make vuln` (scripts/vuln.sh): it reads
// govulncheck's -format json stream on stdin and fails when our code calls
// a vulnerability that the allow-list (.govulncheck-allow.yaml) does not
// name, when an entry is past its review-by date, and when an entry names
// a vulnerability that is no longer called (a stale reason would otherwise
// wave through its return). Vulnerabilities only in required modules or
// imported packages are listed, not judged: govulncheck's symbol scan shows
// our code cannot reach them.
//
//	go tool govulncheck -db file://DB -format json ./... |
//	  go run ./scripts/vulncheck -allow .govulncheck-allow.yaml
//
// echo_test.go proves the reasons the allow-list gives for echo's two
// entries, on every `make test`.
//
// Imports: the standard library and gopkg.in/yaml.v3 only.
package main
