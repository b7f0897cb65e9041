// Command reference evaluates conformance suites with the implementations samplectl is measured
// against (kro's CEL environment on cel-go, and gojq) and writes one JSON line per case: what the case
// expects, what the reference gave, and the inputs in a typed form samplectl's runner can read.
//
//	reference cel-spec <testdata dir>       cel-spec's simple tests (cel.dev/expr)
//	reference cel-tests <name> <file.go>... table tests of cel-go's ext or the API server's library
//	reference jq <gojq test.yaml> <jq.test> gojq's CLI tests and jq's own tests
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: reference cel-spec DIR | cel-tests NAME FILE.go... | jq TEST.yaml JQ.test")
		os.Exit(2)
	}
	out := json.NewEncoder(os.Stdout)
	out.SetEscapeHTML(false)
	var err error
	switch os.Args[1] {
	case "cel-spec":
		err = celSpec(os.Args[2], out)
	case "cel-tests":
		err = celTables(os.Args[2], os.Args[3:], out)
	case "jq":
		err = jqSuites(os.Args[2:], out)
	default:
		err = fmt.Errorf("unknown suite %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "reference:", err)
		os.Exit(1)
	}
}
