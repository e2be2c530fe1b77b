package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// envFlags is one command's flag set. Each flag defined through its methods
// also takes its value from a FENCEGATE_* environment variable (a flag wins),
// and keeps what -h and docs/FLAGS.md print: the variable, the default as the
// code sets it (never a value from the environment, which may be a secret),
// and the heading it is listed under.
type envFlags struct {
	*flag.FlagSet
	*flagInfo
}

type flagInfo struct {
	command  string            // "audit", "keys create"
	synopsis string            // the usage text printed above the flags
	env      map[string]string // flag → its variable(s), as printed
	defaults map[string]string // flag → the code's default
	group    map[string]string // flag → its heading
	groups   []string          // headings in the order first used
	order    []string          // flags defined with a variable, in order
	current  string
	hidden   map[string]bool     // old names still accepted, not listed
	required map[string][]string // flag → what to set, for the error
}

// flagSets records every flag set made while recording is on: the flag
// reference (docs/FLAGS.md) is what each command defines when asked -h.
var flagSets *[]envFlags

func newFlags(command, synopsis string) envFlags {
	f := envFlags{flag.NewFlagSet("fencegate "+command, flag.ContinueOnError), &flagInfo{
		command: command, synopsis: synopsis, env: map[string]string{}, defaults: map[string]string{},
		group: map[string]string{}, hidden: map[string]bool{}, required: map[string][]string{},
	}}
	f.Usage = func() { f.printHelp(f.Output()) }
	if flagSets != nil {
		f.SetOutput(io.Discard)
		*flagSets = append(*flagSets, f)
	}
	return f
}

// heading lists the flags defined after it under title in -h.
func (f envFlags) heading(title string) { f.current = title }

// note records flag name's variable(s) as printed, its default and heading.
func (f envFlags) note(name, env, def string) {
	f.env[name], f.defaults[name] = env, def
	f.group[name] = f.current
	f.order = append(f.order, name)
	for _, g := range f.groups {
		if g == f.current {
			return
		}
	}
	f.groups = append(f.groups, f.current)
}

func (f envFlags) String(p *string, name, env, def, usage string) {
	f.note(name, "$"+env, def)
	if v, ok := os.LookupEnv(env); ok {
		def = v
	}
	f.StringVar(p, name, def, usage)
}

func (f envFlags) Duration(p *time.Duration, name, env string, def time.Duration, usage string) {
	f.note(name, "$"+env, def.String())
	if v, ok := os.LookupEnv(env); ok {
		if d, err := time.ParseDuration(v); err == nil {
			def = d
		} else {
			fmt.Fprintf(os.Stderr, "ignoring %s=%q: %v\n", env, v, err)
		}
	}
	f.DurationVar(p, name, def, usage)
}

func (f envFlags) Int(p *int, name, env string, def int, usage string) {
	f.note(name, "$"+env, strconv.Itoa(def))
	if v, ok := os.LookupEnv(env); ok {
		if n, err := strconv.Atoi(v); err == nil {
			def = n
		} else {
			fmt.Fprintf(os.Stderr, "ignoring %s=%q: %v\n", env, v, err)
		}
	}
	f.IntVar(p, name, def, usage)
}

func (f envFlags) Bool(p *bool, name, env string, def bool, usage string) {
	f.note(name, "$"+env, strconv.FormatBool(def))
	if v, ok := os.LookupEnv(env); ok {
		if b, err := strconv.ParseBool(v); err == nil {
			def = b
		} else {
			fmt.Fprintf(os.Stderr, "ignoring %s=%q: %v\n", env, v, err)
		}
	}
	f.BoolVar(p, name, def, usage)
}

// alias accepts an old flag and variable for flag name: the old flag sets the
// same value (and is not listed), the old variable is read when the new one
// is not set. Existing command lines and env files keep working.
func (f envFlags) alias(name, oldName, oldEnv string) {
	fl := f.Lookup(name)
	newEnv := strings.TrimPrefix(f.env[name], "$")
	if _, set := os.LookupEnv(newEnv); !set {
		if v, ok := os.LookupEnv(oldEnv); ok {
			if err := fl.Value.Set(v); err != nil {
				fmt.Fprintf(os.Stderr, "ignoring %s=%q: %v\n", oldEnv, v, err)
			}
		}
	}
	f.Var(fl.Value, oldName, "old name of --"+name)
	f.hidden[oldName] = true
}

// given reports whether flag name was set on the command line or by its
// variable, not left at the code's default.
func (f envFlags) given(name string) bool {
	set := false
	f.Visit(func(fl *flag.Flag) { set = set || fl.Name == name })
	_, inEnv := os.LookupEnv(strings.TrimPrefix(f.env[name], "$"))
	return set || inEnv
}

// require makes Parse refuse an empty flag, naming the flag and its variables.
func (f envFlags) require(names ...string) {
	for _, n := range names {
		f.required[n] = []string{"--" + n, f.env[n]}
	}
}

// Parse parses args, then refuses missing required settings, each named with
// the flag and the variable that set it.
func (f envFlags) Parse(args []string) error {
	if err := f.FlagSet.Parse(args); err != nil {
		return err
	}
	var missing []string
	f.VisitAll(func(fl *flag.Flag) {
		if ways, ok := f.required[fl.Name]; ok && fl.Value.String() == "" {
			missing = append(missing, strings.Join(ways, " or "))
		}
	})
	if len(missing) > 0 {
		return fmt.Errorf("missing configuration: set %s (`source .fencegate/env` sets them for the stack `make run` started)",
			strings.Join(missing, "; "))
	}
	return nil
}

// listed is the flags -h shows, by heading: first a command's own flags
// without a variable (defined with the plain flag methods, by name), then
// each heading's in the order they were defined.
func (f envFlags) listed() (groups []string, byGroup map[string][]*flag.Flag) {
	byGroup = map[string][]*flag.Flag{}
	f.VisitAll(func(fl *flag.Flag) {
		if _, noted := f.group[fl.Name]; !noted && !f.hidden[fl.Name] {
			byGroup[""] = append(byGroup[""], fl)
		}
	})
	for _, name := range f.order {
		g := f.group[name]
		byGroup[g] = append(byGroup[g], f.Lookup(name))
	}
	if len(byGroup[""]) > 0 {
		groups = append(groups, "")
	}
	for _, g := range f.groups {
		if g != "" {
			groups = append(groups, g)
		}
	}
	return groups, byGroup
}

func isZero(def string) bool { return def == "" || def == "0" || def == "0s" || def == "false" }

// def is the flag's default as the code sets it.
func (f envFlags) def(fl *flag.Flag) string {
	if d, ok := f.defaults[fl.Name]; ok {
		return d
	}
	return fl.DefValue
}

func (f envFlags) printHelp(w io.Writer) {
	fmt.Fprint(w, f.synopsis)
	groups, byGroup := f.listed()
	if len(groups) == 0 {
		return
	}
	for _, g := range groups {
		title := g
		if title == "" {
			title = "flags"
		}
		fmt.Fprintf(w, "\n%s:\n", title)
		for _, fl := range byGroup[g] {
			line := "  --" + fl.Name
			if typ, _ := flag.UnquoteUsage(fl); typ != "" {
				line += " " + typ
			}
			var extra []string
			if d := f.def(fl); !isZero(d) {
				extra = append(extra, "default "+d)
			}
			if e := f.env[fl.Name]; e != "" {
				extra = append(extra, e)
			}
			if len(extra) > 0 {
				line += "  [" + strings.Join(extra, ", ") + "]"
			}
			fmt.Fprintf(w, "%s\n      %s\n", line, fl.Usage)
		}
	}
}

// database adds --database-url, required: every command that talks to
// PostgreSQL.
func (f envFlags) database(p *string) {
	f.heading("PostgreSQL")
	def := os.Getenv("DATABASE_URL")
	if v, ok := os.LookupEnv("FENCEGATE_DATABASE_URL"); ok {
		def = v
	}
	f.note("database-url", "$FENCEGATE_DATABASE_URL or $DATABASE_URL", "")
	f.StringVar(p, "database-url", def, "PostgreSQL connection URL")
	f.require("database-url")
}

// serverKey reads the key that seals access-key secrets, from the flag/variable
// or from a file.
func (f envFlags) serverKey(key, file *string) {
	f.heading("access-key sealing")
	f.String(key, "server-key", "FENCEGATE_SERVER_KEY", "", "32-byte key sealing access-key secrets at rest, hex or base64")
	f.String(file, "server-key-file", "FENCEGATE_SERVER_KEY_FILE", "", "file holding the server key (instead of --server-key)")
}

// storeConfig is the S3 store behind the gateway, as every command that talks
// to it names it: --store-* flags, FENCEGATE_STORE_* variables (the names
// `make run`'s env file exports). The --backend-* flags and
// FENCEGATE_BACKEND_* variables are their old names, still accepted.
type storeConfig struct {
	Endpoint, AccessKey, SecretKey, Region string
}

func (f envFlags) store(c *storeConfig) {
	f.heading("the S3 store")
	for _, s := range []struct {
		p                   *string
		name, env, def, use string
		oldName, oldEnv     string
	}{
		{&c.Endpoint, "store-endpoint", "FENCEGATE_STORE_ENDPOINT", "", "URL of the S3 store behind the gateway", "backend-endpoint", "FENCEGATE_BACKEND_ENDPOINT"},
		{&c.AccessKey, "store-access-key", "FENCEGATE_STORE_ACCESS_KEY_ID", "", "fencegate's own access key at the store", "backend-access-key", "FENCEGATE_BACKEND_ACCESS_KEY_ID"},
		{&c.SecretKey, "store-secret-key", "FENCEGATE_STORE_SECRET_ACCESS_KEY", "", "fencegate's own secret key at the store", "backend-secret-key", "FENCEGATE_BACKEND_SECRET_ACCESS_KEY"},
		{&c.Region, "store-region", "FENCEGATE_STORE_REGION", "us-east-1", "region fencegate signs for at the store", "backend-region", "FENCEGATE_BACKEND_REGION"},
	} {
		f.String(s.p, s.name, s.env, s.def, s.use)
		f.alias(s.name, s.oldName, s.oldEnv)
	}
	f.require("store-endpoint", "store-access-key", "store-secret-key")
}

func loadServerKey(key, file string) (string, error) {
	if key != "" {
		return key, nil
	}
	if file == "" {
		return "", fmt.Errorf("no server key: set --server-key or $FENCEGATE_SERVER_KEY, or --server-key-file or $FENCEGATE_SERVER_KEY_FILE (generate one with `openssl rand -hex 32`; `source .fencegate/env` sets it for the stack `make run` started)")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("server key file: %w", err)
	}
	return string(b), nil
}
