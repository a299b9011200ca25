// Command go-reference answers test cases with Go's own libraries, so that the Rust
// reimplementations in this workspace can be compared with them byte for byte
// (see e2e/go-differential).
//
// Usage: go-reference <mode> < cases.jsonl > answers.jsonl
//
// Every input line is one JSON case; every output line is the JSON answer to the case on the
// same line. Modes:
//
//	template  {"text": string, "context": object}
//	          -> {"out": string} | {"err": "parse"|"exec"|"limit", "msg": string}
//	          ("limit": past 1 MiB of output or 10 s, where Go itself has no limit)
//	cron      {"spec": string, "zone": string, "from": unix seconds, "n": int}
//	          -> {"next": [unix seconds | null, ...]} | {"err": "parse", "msg": string} | {"err": "panic", "msg": string}
//	duration  {"text": string} -> {"ns": int, "str": string, "secs": string} | {"err": "parse", "msg": string}
//	hash      {"defs": [{"name": string, "spec": any}]} -> {"json": string, "hash": string} | {"err": "decode", "msg": string}
package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"text/template"
	"time"
	_ "time/tzdata"

	sprig "github.com/go-task/slim-sprig/v3"
	"github.com/robfig/cron/v3"
	kjson "sigs.k8s.io/json"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go-reference template|cron|duration|hash < cases.jsonl")
		os.Exit(2)
	}
	var answer func([]byte) any
	switch os.Args[1] {
	case "template":
		answer = templateCase
	case "cron":
		answer = cronCase
	case "duration":
		answer = durationCase
	case "hash":
		answer = hashCase
	default:
		fmt.Fprintf(os.Stderr, "unknown mode %q\n", os.Args[1])
		os.Exit(2)
	}
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriterSize(os.Stdout, 1<<20)
	defer out.Flush()
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	for {
		line, err := in.ReadBytes('\n')
		line = bytes.TrimSpace(line)
		if len(line) > 0 {
			if e := enc.Encode(answer(line)); e != nil {
				fmt.Fprintln(os.Stderr, e)
				os.Exit(1)
			}
		}
		if err != nil {
			break
		}
	}
}

type failure struct {
	Err string `json:"err"`
	Msg string `json:"msg"`
}

func bad(line []byte, err error) {
	fmt.Fprintf(os.Stderr, "malformed case %s: %v\n", line, err)
	os.Exit(1)
}

// ---- template ----

type templateIn struct {
	Text    string          `json:"text"`
	Context json.RawMessage `json:"context"`
}

// The context the way upstream's drivers build it: the application is an unstructured object
// (integers int64, other numbers float64), the route's parameters a map[string]string.
func templateContext(raw json.RawMessage) (map[string]any, error) {
	ctx := map[string]any{}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &ctx); err != nil {
		return nil, err
	}
	if p, ok := ctx["Parameters"].(map[string]any); ok {
		params := make(map[string]string, len(p))
		for k, v := range p {
			s, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("parameter %q is not a string", k)
			}
			params[k] = s
		}
		ctx["Parameters"] = params
	}
	return ctx, nil
}

func templateCase(line []byte) any {
	var c templateIn
	if err := json.Unmarshal(line, &c); err != nil {
		bad(line, err)
	}
	ctx, err := templateContext(c.Context)
	if err != nil {
		bad(line, err)
	}
	tpl, err := template.New("this").Funcs(sprig.FuncMap()).Parse(c.Text)
	if err != nil {
		return failure{"parse", err.Error()}
	}
	// Go puts no limit on a template (a range over a huge integer runs until the process runs
	// out of memory, or without output practically forever): past 1 MiB of output or 10 seconds
	// the case is answered as "limit" (see the Rust side's check). A timed-out execution is left
	// running; it ends with the process.
	buf := &limitedBuffer{max: 1 << 20}
	done := make(chan error, 1)
	go func() { done <- tpl.Execute(buf, ctx) }()
	select {
	case err := <-done:
		if err != nil {
			if errors.Is(err, errOutputLimit) {
				return failure{"limit", err.Error()}
			}
			return failure{"exec", err.Error()}
		}
	case <-time.After(10 * time.Second):
		return failure{"limit", "execution did not end within 10s"}
	}
	return struct {
		Out string `json:"out"`
	}{buf.b.String()}
}

var errOutputLimit = errors.New("output exceeds 1 MiB")

type limitedBuffer struct {
	b   bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if l.b.Len()+len(p) > l.max {
		return 0, errOutputLimit
	}
	return l.b.Write(p)
}

// ---- cron ----

type cronIn struct {
	Spec string `json:"spec"`
	Zone string `json:"zone"`
	From int64  `json:"from"`
	N    int    `json:"n"`
}

func cronCase(line []byte) (answer any) {
	var c cronIn
	if err := json.Unmarshal(line, &c); err != nil {
		bad(line, err)
	}
	zone, err := time.LoadLocation(c.Zone)
	if err != nil {
		bad(line, err)
	}
	defer func() {
		if r := recover(); r != nil {
			answer = failure{"panic", fmt.Sprint(r)}
		}
	}()
	sched, err := cron.ParseStandard(c.Spec)
	if err != nil {
		return failure{"parse", err.Error()}
	}
	// A spec without a zone prefix is read in the zone of the time given to Next (robfig keeps
	// time.Local as the schedule's zone and then uses the argument's).
	t := time.Unix(c.From, 0).In(zone)
	next := make([]*int64, 0, c.N)
	for i := 0; i < c.N; i++ {
		t = sched.Next(t)
		if t.IsZero() {
			next = append(next, nil)
			break
		}
		u := t.Unix()
		next = append(next, &u)
	}
	return struct {
		Next []*int64 `json:"next"`
	}{next}
}

// ---- duration ----

func durationCase(line []byte) any {
	var c struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(line, &c); err != nil {
		bad(line, err)
	}
	d, err := time.ParseDuration(c.Text)
	if err != nil {
		return failure{"parse", err.Error()}
	}
	// Also the whole seconds of it, as Go prints them (what a deadline in whole seconds shows).
	return struct {
		Ns   int64  `json:"ns"`
		Str  string `json:"str"`
		Secs string `json:"secs"`
	}{int64(d), d.String(), d.Truncate(time.Second).String()}
}

// ---- hash ----
//
// The ApplicationDefinition spec types, field for field in upstream's declaration order, with
// upstream's JSON tags: json.Marshal writes fields in declaration order, so the order here is
// what the hash depends on.

type appDefSpec struct {
	Application appDefApplication `json:"application"`
	Release     appDefRelease     `json:"release"`
	Secrets     appDefResources   `json:"secrets,omitempty"`
	Services    appDefResources   `json:"services,omitempty"`
	Ingresses   appDefResources   `json:"ingresses,omitempty"`
	Dashboard   *appDefDashboard  `json:"dashboard,omitempty"`
}

type appDefApplication struct {
	Kind          string `json:"kind"`
	OpenAPISchema string `json:"openAPISchema"`
	Plural        string `json:"plural"`
	Singular      string `json:"singular"`
}

type appDefRelease struct {
	ChartRef         *chartRef           `json:"chartRef"`
	Labels           map[string]string   `json:"labels,omitempty"`
	Prefix           string              `json:"prefix"`
	WaitStrategy     string              `json:"waitStrategy,omitempty"`
	HealthCheckExprs []customHealthCheck `json:"healthCheckExprs,omitempty"`
}

type chartRef struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	Namespace  string `json:"namespace,omitempty"`
}

type customHealthCheck struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	healthCheckExpressions `json:",inline"`
}

type healthCheckExpressions struct {
	Current    string `json:"current"`
	InProgress string `json:"inProgress,omitempty"`
	Failed     string `json:"failed,omitempty"`
}

type appDefResources struct {
	Exclude []*resourceSelector `json:"exclude,omitempty"`
	Include []*resourceSelector `json:"include,omitempty"`
}

type resourceSelector struct {
	labelSelector `json:",inline"`
	ResourceNames []string `json:"resourceNames,omitempty"`
}

type labelSelector struct {
	MatchLabels      map[string]string          `json:"matchLabels,omitempty"`
	MatchExpressions []labelSelectorRequirement `json:"matchExpressions,omitempty"`
}

type labelSelectorRequirement struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values,omitempty"`
}

type appDefDashboard struct {
	Singular         string     `json:"singular"`
	Plural           string     `json:"plural"`
	Name             string     `json:"name,omitempty"`
	SingularResource bool       `json:"singularResource,omitempty"`
	Weight           int        `json:"weight,omitempty"`
	Description      string     `json:"description,omitempty"`
	Icon             string     `json:"icon,omitempty"`
	Category         string     `json:"category"`
	Tags             []string   `json:"tags,omitempty"`
	Tabs             []string   `json:"tabs,omitempty"`
	KeysOrder        [][]string `json:"keysOrder,omitempty"`
	Module           bool       `json:"module,omitempty"`
}

type hashView struct {
	Name string     `json:"name"`
	Spec appDefSpec `json:"spec"`
}

func hashCase(line []byte) any {
	var c struct {
		Defs []struct {
			Name string          `json:"name"`
			Spec json.RawMessage `json:"spec"`
		} `json:"defs"`
	}
	if err := json.Unmarshal(line, &c); err != nil {
		bad(line, err)
	}
	views := make([]hashView, 0, len(c.Defs))
	for _, d := range c.Defs {
		v := hashView{Name: d.Name}
		if len(d.Spec) > 0 {
			// The API client decodes objects case-sensitively, integers kept as integers.
			if err := kjson.UnmarshalCaseSensitivePreserveInts(d.Spec, &v.Spec); err != nil {
				return failure{"decode", err.Error()}
			}
		}
		views = append(views, v)
	}
	sort.Slice(views, func(i, j int) bool { return views[i].Name < views[j].Name })
	b, err := json.Marshal(views)
	if err != nil {
		return failure{"encode", err.Error()}
	}
	sum := sha256.Sum256(b)
	return struct {
		JSON string `json:"json"`
		Hash string `json:"hash"`
	}{string(b), hex.EncodeToString(sum[:])}
}
