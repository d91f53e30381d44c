package config

import (
	"fmt"
	"log/slog"
	"net/url"
	"reflect"
	"strings"
	"time"

	"github.com/agentledger/reconciler/internal/yamlnode"
)

// RedactedText is what Redacted puts in place of every secret of the
// effective configuration.
const RedactedText = "REDACTED"

// Redacted returns a copy of c in which every value tagged `secret` is
// replaced by "REDACTED": tenant and admin tokens, webhook secrets, API keys,
// the PagerDuty routing key, the path of a webhook pager URL, and the
// password (or token) inside the store and NATS URLs. Empty values stay empty
// so the log still shows what is missing. The copy shares nothing with c.
//
// Secrets are found by struct tag rather than listed here, so a field added
// later with `secret:"true"` is redacted without touching this function (and
// TestRedactedCoversEverySecretField fails if a secret-looking field has no tag).
func (c Config) Redacted() Config {
	out := c.clone()
	redactStruct(reflect.ValueOf(&out).Elem())
	for i, p := range out.Vendors {
		out.Vendors[i] = p.Redacted()
	}
	return out
}

func redactStruct(v reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		fv := v.Field(i)
		if mode, ok := f.Tag.Lookup("secret"); ok {
			redactValue(fv, mode)
			continue
		}
		switch fv.Kind() {
		case reflect.Struct:
			redactStruct(fv)
		case reflect.Slice:
			if fv.Type().Elem().Kind() == reflect.Struct {
				for j := range fv.Len() {
					redactStruct(fv.Index(j))
				}
			}
		}
	}
}

func redactValue(v reflect.Value, mode string) {
	switch v.Kind() {
	case reflect.String:
		if s := v.String(); s != "" {
			v.SetString(redactString(s, mode))
		}
	case reflect.Slice:
		for j := range v.Len() {
			redactValue(v.Index(j), mode)
		}
	}
}

func redactString(s, mode string) string {
	switch mode {
	case "url":
		parts := strings.Split(s, ",")
		for i, p := range parts {
			parts[i] = redactURL(p)
		}
		return strings.Join(parts, ",")
	case "endpoint":
		u, err := url.Parse(strings.TrimSpace(s))
		if err != nil || u.Host == "" || u.Opaque != "" {
			return RedactedText
		}
		if u.Path == "" && u.RawQuery == "" && u.User == nil && u.Fragment == "" {
			return u.String()
		}
		return u.Scheme + "://" + u.Host + "/" + RedactedText
	default:
		return RedactedText
	}
}

// redactURL hides the password of a URL, the token of nats://TOKEN@host, and
// query parameters that look like credentials (postgres' password=, sslpassword=).
// A value that does not parse is hidden whole: we cannot tell which part is secret.
func redactURL(s string) string {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, ":") {
		return s // "bolt"
	}
	u, err := url.Parse(s)
	if err != nil || u.Opaque != "" {
		return RedactedText
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), RedactedText)
		} else if u.Scheme != "postgres" && u.Scheme != "postgresql" {
			u.User = url.User(RedactedText) // nats://TOKEN@host: the user part is the token
		}
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			if sensitiveParam(k) {
				q[k] = []string{RedactedText}
			}
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}

func sensitiveParam(k string) bool {
	k = strings.ToLower(k)
	for _, w := range []string{"pass", "secret", "token", "key", "auth"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	levelType    = reflect.TypeFor[slog.Level]()
)

// document renders c the way the config file spells it (yaml keys, Go
// durations, "1MiB"), for the start-up log line. Callers pass a redacted copy.
func document(c Config) map[string]any {
	m, _ := documentValue(reflect.ValueOf(c)).(map[string]any)
	if c.File != "" {
		m["config"] = c.File
	}
	return m
}

func documentValue(v reflect.Value) any {
	switch {
	case v.Type() == durationType:
		return formatDuration(time.Duration(v.Int()))
	case v.Type() == levelType:
		return strings.ToLower(slog.Level(v.Int()).String())
	}
	if s, ok := v.Interface().(fmt.Stringer); ok && v.Kind() != reflect.Struct {
		return s.String()
	}
	switch v.Kind() {
	case reflect.Struct:
		m := make(map[string]any)
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			name := yamlnode.FieldName(f)
			if name == "" {
				continue
			}
			m[name] = documentValue(v.Field(i))
		}
		return m
	case reflect.Slice:
		out := make([]any, 0, v.Len())
		for j := range v.Len() {
			out = append(out, documentValue(v.Index(j)))
		}
		return out
	case reflect.Map:
		out := make(map[string]any, v.Len())
		iter := v.MapRange()
		for iter.Next() {
			out[iter.Key().String()] = documentValue(iter.Value())
		}
		return out
	case reflect.String:
		return v.String()
	default:
		return fmt.Sprint(v.Interface())
	}
}

// formatDuration writes 168h rather than 168h0m0s.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
