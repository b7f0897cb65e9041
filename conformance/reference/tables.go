package main

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
)

// celTables reads Go table tests (cel-go's ext package, the API server's CEL library): every struct
// literal with an `expr` string is a case. One with `err` expects an error containing it; one without
// expects true, as those tables assert with `==`. A case that needs more than the expression
// (variables, inputs, an expected value other than true) is written as skipped, with the reason.
func celTables(name string, paths []string, out *json.Encoder) error {
	for _, path := range paths {
		files := token.NewFileSet()
		file, err := parser.ParseFile(files, path, nil, 0)
		if err != nil {
			return err
		}
		suite := name + "/" + strings.TrimSuffix(filepath.Base(path), "_test.go")
		n := 0
		ast.Inspect(file, func(node ast.Node) bool {
			literal, ok := node.(*ast.CompositeLit)
			if !ok {
				return true
			}
			fields := map[string]ast.Expr{}
			for _, element := range literal.Elts {
				if kv, ok := element.(*ast.KeyValueExpr); ok {
					if key, ok := kv.Key.(*ast.Ident); ok {
						fields[key.Name] = kv.Value
					}
				}
			}
			expression, ok := stringOf(fields["expr"])
			if !ok {
				return true
			}
			n++
			c := Case{Suite: suite, Name: fmt.Sprintf("%s:%d", filepath.Base(path), files.Position(literal.Pos()).Line), Expr: expression, Check: true}
			if name, ok := stringOf(fields["name"]); ok {
				c.Name += " " + name
			}
			c.Expect = Outcome{Value: map[string]any{"bool": true}}
			// The API server's tables give their expected values as Go code (`trueVal`,
			// `apiservercel.IP{...}`): there the reference's own value is what is expected, and the
			// measure is whether samplectl agrees with it.
			asReference := false
			for _, key := range []string{"expectResult", "expectValue"} {
				if _, has := fields[key]; has {
					asReference = true
				}
			}
			for _, key := range []string{"err", "expectRuntimeErr", "expectRuntimeErrPattern"} {
				if text, ok := stringOf(fields[key]); ok && text != "" {
					c.Expect = Outcome{Error: text}
					asReference = false
				}
			}
			if _, has := fields["expectCompileErrs"]; has {
				c.Expect = Outcome{Error: "a compile error"}
				asReference = false
			}
			if only, ok := fields["parseOnly"].(*ast.Ident); ok && only.Name == "true" {
				c.Check = false
			}
			for _, needs := range []string{"in", "vars", "out", "opts", "hints", "unparsed", "wantUnparsed", "activation"} {
				if _, has := fields[needs]; has {
					c.Expect = Outcome{Skip: "the case needs its `" + needs + "` field, which this reader does not take"}
				}
			}
			if c.Expect.Skip == "" {
				c.Reference = evaluate(c.Expr, c.Check, nil, map[string]any{})
				if asReference {
					c.Expect = c.Reference
				}
				c.Pass = passes(c.Expect, c.Reference)
				if c.Expect.Error != "" && c.Expect.Error != "a compile error" && !strings.Contains(c.Reference.Error, c.Expect.Error) {
					c.Pass = false
				}
			}
			if err := out.Encode(c); err != nil {
				panic(err)
			}
			return false
		})
		if n == 0 {
			return fmt.Errorf("%s: no table cases found", path)
		}
	}
	return nil
}

func stringOf(e ast.Expr) (string, bool) {
	literal, ok := e.(*ast.BasicLit)
	if !ok || literal.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(literal.Value)
	return s, err == nil
}
