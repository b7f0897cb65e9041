package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	celexpr "cel.dev/expr"
	"cel.dev/expr/conformance/test"
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	krocel "github.com/kubernetes-sigs/kro/pkg/cel"
	"google.golang.org/protobuf/encoding/prototext"
	"k8s.io/apimachinery/pkg/api/resource"
	"google.golang.org/protobuf/types/known/anypb"

	// The test files' Any values name these messages; parsing them needs the types registered.
	_ "cel.dev/expr/conformance/proto2"
	_ "cel.dev/expr/conformance/proto3"
)

// Case is one line of the output: the expression, its inputs, what the suite expects and what the
// reference gave. Values are tagged ({"int": "1"}, {"list": [...]}, ...) so that CEL's types survive JSON.
type Case struct {
	Suite     string         `json:"suite"`
	Name      string         `json:"name"`
	Expr      string         `json:"expr"`
	Check     bool           `json:"check"`
	Bindings  map[string]any `json:"bindings,omitempty"`
	Inputs    []string       `json:"inputs,omitempty"`
	Expect    Outcome        `json:"expect"`
	Reference Outcome        `json:"reference"`
	Pass      bool           `json:"reference_pass"`
}

// Outcome is a value, an error, or why the case cannot be run at all.
type Outcome struct {
	Value any    `json:"value,omitempty"`
	Error string `json:"error,omitempty"`
	Skip  string `json:"skip,omitempty"`
}

func celSpec(dir string, out *json.Encoder) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.textproto"))
	if err != nil {
		return err
	}
	for _, path := range files {
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var file test.SimpleTestFile
		if err := prototext.Unmarshal(text, &file); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		suite := "cel-spec/" + strings.TrimSuffix(filepath.Base(path), ".textproto")
		seen := map[string]int{}
		for _, section := range file.GetSection() {
			for _, t := range section.GetTest() {
				c := specCase(suite, section.GetName(), t)
				// A few names repeat within a file; a second is numbered.
				if seen[c.Name]++; seen[c.Name] > 1 {
					c.Name = fmt.Sprintf("%s #%d", c.Name, seen[c.Name])
				}
				if err := out.Encode(c); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func specCase(suite, section string, t *test.SimpleTest) Case {
	c := Case{Suite: suite, Name: section + "/" + t.GetName(), Expr: t.GetExpr(), Check: !t.GetDisableCheck()}
	switch m := t.GetResultMatcher().(type) {
	case *test.SimpleTest_Value:
		c.Expect = expected(m.Value)
	case *test.SimpleTest_TypedResult:
		c.Expect = expected(m.TypedResult.GetResult())
	case *test.SimpleTest_EvalError:
		c.Expect = Outcome{Error: errorText(m.EvalError.GetErrors())}
	case *test.SimpleTest_AnyEvalErrors:
		c.Expect = Outcome{Error: "any of several errors"}
	case *test.SimpleTest_Unknown, *test.SimpleTest_AnyUnknowns:
		c.Expect = Outcome{Skip: "unknowns: partial evaluation, which kro does not use"}
	default:
		c.Expect = Outcome{Value: map[string]any{"bool": true}}
	}
	if t.GetCheckOnly() {
		c.Expect = Outcome{Skip: "a type-check-only case"}
	}
	if t.GetDisableMacros() {
		c.Expect = Outcome{Skip: "macros disabled: kro always has them"}
	}
	if t.GetContainer() != "" {
		c.Expect = Outcome{Skip: "a container: names resolved in a protobuf package, which kro does not set"}
	}
	if t.GetLocale() != "" {
		c.Expect = Outcome{Skip: "a locale: kro sets none"}
	}
	names := []string{}
	for _, decl := range t.GetTypeEnv() {
		if decl.GetIdent() != nil {
			names = append(names, decl.GetName())
		}
	}
	activation := map[string]any{}
	for name, value := range t.GetBindings() {
		names = append(names, name)
		v, err := valueOf(value.GetValue())
		if err != nil {
			c.Expect = Outcome{Skip: "binding " + name + ": " + err.Error()}
			continue
		}
		activation[name] = v
		if c.Bindings == nil {
			c.Bindings = map[string]any{}
		}
		c.Bindings[name] = encode(v)
		if text := canonical(c.Bindings[name]); strings.Contains(text, `"object":`) || strings.Contains(text, `"error":`) {
			c.Expect = Outcome{Skip: "binding " + name + " is a protobuf message: an RGD's inputs are JSON objects"}
		}
	}
	if c.Expect.Skip != "" {
		return c
	}
	c.Reference = evaluate(c.Expr, c.Check, names, activation)
	c.Pass = passes(c.Expect, c.Reference)
	return c
}

// evaluate runs an expression in kro's environment (the one its RGDs' expressions get), every
// variable declared as kro declares a resource: of any type.
func evaluate(expression string, check bool, names []string, activation map[string]any) Outcome {
	env, err := krocel.DefaultEnvironment(krocel.WithResourceIDs(names))
	if err != nil {
		return Outcome{Error: "environment: " + err.Error()}
	}
	var ast *cel.Ast
	var iss *cel.Issues
	if check {
		ast, iss = env.Compile(expression)
	} else {
		ast, iss = env.Parse(expression)
	}
	if iss.Err() != nil {
		return Outcome{Error: iss.Err().Error()}
	}
	program, err := env.Program(ast)
	if err != nil {
		return Outcome{Error: err.Error()}
	}
	result, _, err := program.Eval(activation)
	if err != nil {
		return Outcome{Error: err.Error()}
	}
	return Outcome{Value: encode(result)}
}

func passes(expect, got Outcome) bool {
	switch {
	case expect.Skip != "":
		return false
	case expect.Error != "":
		return got.Error != ""
	default:
		return got.Error == "" && same(expect.Value, got.Value)
	}
}

func errorText(errors []*celexpr.Status) string {
	var texts []string
	for _, s := range errors {
		texts = append(texts, s.GetMessage())
	}
	if len(texts) == 0 {
		return "an error"
	}
	return strings.Join(texts, "; ")
}

func expected(v *celexpr.Value) Outcome {
	value, err := valueOf(v)
	if err != nil {
		return Outcome{Skip: "expected value: " + err.Error()}
	}
	return Outcome{Value: encode(value)}
}

// valueOf turns the suite's protobuf value into cel-go's.
func valueOf(v *celexpr.Value) (ref.Val, error) {
	adapter := types.DefaultTypeAdapter
	switch k := v.GetKind().(type) {
	case *celexpr.Value_NullValue:
		return types.NullValue, nil
	case *celexpr.Value_BoolValue:
		return types.Bool(k.BoolValue), nil
	case *celexpr.Value_Int64Value:
		return types.Int(k.Int64Value), nil
	case *celexpr.Value_Uint64Value:
		return types.Uint(k.Uint64Value), nil
	case *celexpr.Value_DoubleValue:
		return types.Double(k.DoubleValue), nil
	case *celexpr.Value_StringValue:
		return types.String(k.StringValue), nil
	case *celexpr.Value_BytesValue:
		return types.Bytes(k.BytesValue), nil
	case *celexpr.Value_EnumValue:
		return types.Int(k.EnumValue.GetValue()), nil
	case *celexpr.Value_TypeValue:
		return types.NewObjectTypeValue(k.TypeValue), nil
	case *celexpr.Value_ListValue:
		var items []ref.Val
		for _, item := range k.ListValue.GetValues() {
			v, err := valueOf(item)
			if err != nil {
				return nil, err
			}
			items = append(items, v)
		}
		return types.NewRefValList(adapter, items), nil
	case *celexpr.Value_MapValue:
		entries := map[ref.Val]ref.Val{}
		for _, e := range k.MapValue.GetEntries() {
			key, err := valueOf(e.GetKey())
			if err != nil {
				return nil, err
			}
			value, err := valueOf(e.GetValue())
			if err != nil {
				return nil, err
			}
			entries[key] = value
		}
		return types.NewRefValMap(adapter, entries), nil
	case *celexpr.Value_ObjectValue:
		message, err := anypb.UnmarshalNew(k.ObjectValue, protoOptions)
		if err != nil {
			return nil, err
		}
		registry, err := types.NewRegistry(message)
		if err != nil {
			return nil, err
		}
		return registry.NativeToValue(message), nil
	}
	return nil, fmt.Errorf("a value of no kind")
}

// encode writes a CEL value with its type: the form samplectl's runner reads and compares.
func encode(v ref.Val) any {
	switch x := v.(type) {
	case types.Int:
		return map[string]any{"int": strconv.FormatInt(int64(x), 10)}
	case types.Uint:
		return map[string]any{"uint": strconv.FormatUint(uint64(x), 10)}
	case types.Double:
		f := float64(x)
		switch {
		case math.IsNaN(f):
			return map[string]any{"double": "NaN"}
		case math.IsInf(f, 1):
			return map[string]any{"double": "+Inf"}
		case math.IsInf(f, -1):
			return map[string]any{"double": "-Inf"}
		}
		return map[string]any{"double": f}
	case types.String:
		return map[string]any{"string": string(x)}
	case types.Bytes:
		return map[string]any{"bytes": base64.StdEncoding.EncodeToString(x)}
	case types.Bool:
		return map[string]any{"bool": bool(x)}
	case types.Null:
		return map[string]any{"null": true}
	case types.Duration:
		return map[string]any{"duration": strconv.FormatInt(x.Duration.Nanoseconds(), 10)}
	case types.Timestamp:
		return map[string]any{"timestamp": x.Time.UTC().Format(time.RFC3339Nano)}
	case *types.Optional:
		if !x.HasValue() {
			return map[string]any{"optional": nil}
		}
		return map[string]any{"optional": encode(x.GetValue())}
	case *types.Type:
		return map[string]any{"type": x.TypeName()}
	case *types.Err:
		return map[string]any{"error": x.Error()}
	}
	if m, ok := v.(traits.Mapper); ok {
		entries := [][2]any{}
		for it := m.Iterator(); it.HasNext() == types.True; {
			key := it.Next()
			entries = append(entries, [2]any{encode(key), encode(m.Get(key))})
		}
		sort.Slice(entries, func(i, j int) bool { return canonical(entries[i][0]) < canonical(entries[j][0]) })
		return map[string]any{"map": entries}
	}
	if l, ok := v.(traits.Lister); ok {
		items := []any{}
		for it := l.Iterator(); it.HasNext() == types.True; {
			items = append(items, encode(it.Next()))
		}
		return map[string]any{"list": items}
	}
	return map[string]any{"object": v.Type().TypeName(), "text": describe(v)}
}

// describe gives a library value's text, so that two are compared by value: a quantity as its exact
// decimal (trailing zeros dropped), the others as their String().
func describe(v ref.Val) string {
	if q, ok := v.Value().(*resource.Quantity); ok {
		text := q.AsDec().String()
		if strings.Contains(text, ".") {
			text = strings.TrimRight(strings.TrimRight(text, "0"), ".")
		}
		return text
	}
	if s, ok := v.Value().(fmt.Stringer); ok {
		return s.String()
	}
	return ""
}

func canonical(v any) string {
	text, _ := json.Marshal(v)
	return string(text)
}

// same compares two encoded values; NaN equals NaN here, as the suite expects.
func same(a, b any) bool {
	return canonical(a) == canonical(b)
}
