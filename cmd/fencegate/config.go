package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"
)

// envFlags defines flags whose defaults come from FENCEGATE_* environment
// variables, so every setting can be given either way (a flag wins).
type envFlags struct{ *flag.FlagSet }

func newFlags(name string) envFlags {
	return envFlags{flag.NewFlagSet("fencegate "+name, flag.ContinueOnError)}
}

func (f envFlags) String(p *string, name, env, def, usage string) {
	if v, ok := os.LookupEnv(env); ok {
		def = v
	}
	f.StringVar(p, name, def, fmt.Sprintf("%s [$%s]", usage, env))
}

func (f envFlags) Duration(p *time.Duration, name, env string, def time.Duration, usage string) {
	if v, ok := os.LookupEnv(env); ok {
		if d, err := time.ParseDuration(v); err == nil {
			def = d
		} else {
			fmt.Fprintf(os.Stderr, "ignoring %s=%q: %v\n", env, v, err)
		}
	}
	f.DurationVar(p, name, def, fmt.Sprintf("%s [$%s]", usage, env))
}

func (f envFlags) Int(p *int, name, env string, def int, usage string) {
	if v, ok := os.LookupEnv(env); ok {
		if n, err := strconv.Atoi(v); err == nil {
			def = n
		} else {
			fmt.Fprintf(os.Stderr, "ignoring %s=%q: %v\n", env, v, err)
		}
	}
	f.IntVar(p, name, def, fmt.Sprintf("%s [$%s]", usage, env))
}

func (f envFlags) Bool(p *bool, name, env string, def bool, usage string) {
	if v, ok := os.LookupEnv(env); ok {
		if b, err := strconv.ParseBool(v); err == nil {
			def = b
		}
	}
	f.BoolVar(p, name, def, fmt.Sprintf("%s [$%s]", usage, env))
}

// databaseFlag is shared by every command that talks to PostgreSQL.
func (f envFlags) database(p *string) {
	def := os.Getenv("DATABASE_URL")
	if v, ok := os.LookupEnv("FENCEGATE_DATABASE_URL"); ok {
		def = v
	}
	f.StringVar(p, "database-url", def, "PostgreSQL connection URL [$FENCEGATE_DATABASE_URL, else $DATABASE_URL]")
}

// serverKey reads the key that seals access-key secrets, from the flag/variable
// or from a file.
func (f envFlags) serverKey(key, file *string) {
	f.String(key, "server-key", "FENCEGATE_SERVER_KEY", "", "32-byte key sealing access-key secrets at rest, hex or base64")
	f.String(file, "server-key-file", "FENCEGATE_SERVER_KEY_FILE", "", "file holding the server key (instead of --server-key)")
}

func loadServerKey(key, file string) (string, error) {
	if key != "" {
		return key, nil
	}
	if file == "" {
		return "", fmt.Errorf("no server key: set --server-key / FENCEGATE_SERVER_KEY or --server-key-file / FENCEGATE_SERVER_KEY_FILE (generate one with `openssl rand -hex 32`)")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("server key file: %w", err)
	}
	return string(b), nil
}
