package config

import (
	"fmt"
	"io"
	"reflect"
	"strings"
)

// WriteHelp writes the part of serve's --help that the settings make: every
// flag with its environment variable, config key and default, the secrets
// that have no flag, and where the development tokens come from.
func WriteHelp(w io.Writer) error {
	def := Default()
	var b strings.Builder
	b.WriteString(`Flags of serve. Each setting has a flag, an environment variable and a
config-file key; a flag beats the environment, which beats the config file,
which beats the default. Durations are Go durations (90s, 15m).

`)
	row := func(flagName, env, key, deflt, usage string) {
		fmt.Fprintf(&b, "  %-36s %-40s %s\n", flagName, env, "default: "+deflt)
		if key != "" {
			usage += " (config key: " + key + ")"
		}
		fmt.Fprintf(&b, "      %s\n", usage)
	}
	row("--config PATH", EnvConfig, "", "none", "YAML config file: tenants, tokens, webhook endpoints, paging, event types")
	var envOnly []Setting
	for _, s := range settings {
		if s.EnvOnly {
			envOnly = append(envOnly, s)
			continue
		}
		row("--"+s.Flag()+" "+metavar(s.Key), s.Env(), s.Key, defaultText(def, s.Key), s.Usage)
	}
	b.WriteString("\nSecrets: environment or config file only (a flag would show them in the process list).\n\n")
	for _, s := range envOnly {
		row("", s.Env(), s.Key, defaultText(def, s.Key), s.Usage)
	}
	fmt.Fprintf(&b, `
Tokens when the config file names no tenants or no admin_tokens:
  %-36s token of tenant %q; unset: %s, generated on the first start (mode 0600)
  %-36s admin token; unset: %s, generated likewise
The log names the token files, never a token. ${VAR} in the config file is
read from the environment; an unset variable stops start-up.
`, EnvToken, DefaultTenant, "<data>/"+TokenFile, EnvAdminToken, "<data>/"+AdminTokenFile)
	_, err := io.WriteString(w, b.String())
	return err
}

// Value is the setting key ("resolver.grace") as the config file spells it
// (90s, 1MiB, debug); false when there is no such setting.
func (c Config) Value(key string) (string, bool) {
	f, ok := fieldByPath(reflect.ValueOf(&c).Elem(), key)
	if !ok {
		return "", false
	}
	return fmt.Sprint(documentValue(f)), true
}

func defaultText(def Config, key string) string {
	s, ok := def.Value(key)
	switch {
	case !ok:
		return "?"
	case s == "" && key == "nats_url":
		return "none (embedded server)"
	case s == "":
		return "none"
	}
	return s
}

// metavar names the kind of value a flag takes, for the help.
func metavar(key string) string {
	var c Config
	f, ok := fieldByPath(reflect.ValueOf(&c).Elem(), key)
	switch {
	case !ok:
		return "VALUE"
	case f.Type() == durationType:
		return "DURATION"
	case f.Type() == reflect.TypeFor[ByteSize]():
		return "SIZE"
	case f.Type() == levelType:
		return "LEVEL"
	case strings.HasSuffix(key, "url") || strings.HasSuffix(key, "api_base") || key == "store":
		return "URL"
	case key == "http" || strings.HasSuffix(key, "listen"):
		return "ADDR"
	case key == "data":
		return "DIR"
	case strings.HasPrefix(key, "nats_"): // the NATS certificates, keys and credentials
		return "FILE"
	default:
		return "NAME"
	}
}
