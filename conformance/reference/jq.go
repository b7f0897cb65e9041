package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/itchyny/gojq"
	"gopkg.in/yaml.v3"
)

// jqSuites runs gojq's CLI tests (cli/test.yaml) and jq's own tests (tests/jq.test) the way
// shell-operator runs a binding's jqFilter (pkg/filter/jq): each input decoded as client-go decodes an
// object (an integer that fits int64 is an int64, any other number a float64), the compiled filter run
// on it, and each output written by encoding/json. A case whose arguments are more than a filter and
// `-c` (other flags, named arguments, files) is written as skipped, with the reason.
func jqSuites(paths []string, out *json.Encoder) error {
	for _, path := range paths {
		var err error
		switch {
		case strings.HasSuffix(path, ".yaml"):
			err = gojqCases(path, out)
		default:
			err = jqTestCases(path, out)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return nil
}

type gojqCase struct {
	Name     string   `yaml:"name"`
	Args     []string `yaml:"args"`
	Input    string   `yaml:"input"`
	Expected string   `yaml:"expected"`
	Error    string   `yaml:"error"`
}

func gojqCases(path string, out *json.Encoder) error {
	text, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var cases []gojqCase
	if err := yaml.Unmarshal(text, &cases); err != nil {
		return err
	}
	for i, t := range cases {
		// Names repeat in the file; the position makes each case's name its own.
		c := Case{Suite: "jq/gojq-cli", Name: fmt.Sprintf("%s #%d", t.Name, i+1)}
		var filter []string
		skip := ""
		for _, arg := range t.Args {
			switch {
			case arg == "-c" || arg == "--compact-output":
			case strings.HasPrefix(arg, "-") && len(filter) == 0:
				skip = "the case needs the command line's " + arg
			default:
				filter = append(filter, arg)
			}
		}
		if len(filter) != 1 && skip == "" {
			skip = "the case gives the command line more than a filter (files or arguments)"
		}
		if len(filter) == 1 {
			c.Expr = filter[0]
		}
		writeJqCase(&c, t.Input, t.Expected, t.Error != "", skip, out)
	}
	return nil
}

// jqTestCases reads jq's test format: a filter line, an input line, the expected outputs, a blank
// line; `%%FAIL` before a filter expects it not to compile.
func jqTestCases(path string, out *json.Encoder) error {
	text, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var lines []string
	for _, line := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") && !strings.HasPrefix(line, "#!") {
			continue
		}
		lines = append(lines, line)
	}
	suite := "jq/" + strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	for i := 0; i < len(lines); {
		if strings.TrimSpace(lines[i]) == "" {
			i++
			continue
		}
		start := i
		block := []string{}
		for i < len(lines) && strings.TrimSpace(lines[i]) != "" {
			block = append(block, lines[i])
			i++
		}
		c := Case{Suite: suite, Name: fmt.Sprintf("%s:%d", filepath.Base(path), start+1)}
		if strings.HasPrefix(block[0], "%%FAIL") {
			if len(block) < 2 {
				continue
			}
			c.Expr = block[1]
			writeJqCase(&c, "null", "", true, "", out)
			continue
		}
		if len(block) < 2 {
			continue
		}
		c.Expr = block[0]
		writeJqCase(&c, block[1], strings.Join(block[2:], "\n"), false, "", out)
	}
	return nil
}

func writeJqCase(c *Case, input, expected string, wantError bool, skip string, out *json.Encoder) {
	inputs, err := decodeStream(input)
	if err != nil && skip == "" {
		skip = "the input is not JSON: " + err.Error()
	}
	texts := []string{}
	for _, v := range inputs {
		texts = append(texts, marshal(v))
	}
	c.Inputs = texts
	switch {
	case skip != "":
		c.Expect = Outcome{Skip: skip}
	case wantError:
		c.Expect = Outcome{Error: "an error"}
	default:
		want, err := decodeStream(expected)
		if err != nil {
			c.Expect = Outcome{Skip: "the expected output is not JSON: " + err.Error()}
			break
		}
		outputs := []string{}
		for _, v := range want {
			outputs = append(outputs, marshal(v))
		}
		c.Expect = Outcome{Value: outputs}
	}
	if c.Expect.Skip == "" {
		c.Reference = runJq(c.Expr, inputs)
		c.Pass = passes(c.Expect, c.Reference)
		if c.Expect.Value != nil && c.Reference.Value != nil {
			c.Pass = canonical(c.Expect.Value) == canonical(c.Reference.Value)
		}
	}
	if err := out.Encode(c); err != nil {
		panic(err)
	}
}

// decodeStream reads JSON values one after another, as client-go reads an object's numbers.
func decodeStream(text string) ([]any, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	values := []any{}
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return values, nil
		}
		if err != nil {
			return nil, err
		}
		values = append(values, numbers(v))
	}
}

func numbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case []any:
		for i := range x {
			x[i] = numbers(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = numbers(x[k])
		}
	}
	return v
}

func marshal(v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	if err := enc.Encode(v); err != nil {
		return "!" + err.Error()
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

// runJq is shell-operator's CompiledJqFilter.Apply over each input in turn, outputs kept apart.
func runJq(filter string, inputs []any) Outcome {
	query, err := gojq.Parse(filter)
	if err != nil {
		return Outcome{Error: err.Error()}
	}
	code, err := gojq.Compile(query)
	if err != nil {
		return Outcome{Error: err.Error()}
	}
	outputs := []string{}
	for _, input := range inputs {
		iter := code.Run(input)
		for n := 0; ; n++ {
			if n > 10000 {
				return Outcome{Error: "more than 10000 outputs"}
			}
			v, ok := iter.Next()
			if !ok {
				break
			}
			if err, ok := v.(error); ok {
				var halt *gojq.HaltError
				if errors.As(err, &halt) && halt.Value() == nil {
					break
				}
				return Outcome{Error: err.Error()}
			}
			text := marshal(v)
			if strings.HasPrefix(text, "!") {
				return Outcome{Error: text[1:]}
			}
			outputs = append(outputs, text)
		}
	}
	return Outcome{Value: outputs}
}
