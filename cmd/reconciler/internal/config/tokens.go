package config

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Development tokens: a single node started without a config file is usable
// at once (README: `make run`, then curl with the token).
//
//   - When the config names no tenants, serve runs one tenant, "default".
//     Its bearer token is $RECONCILER_TOKEN when set; otherwise the token in
//     <data>/token, which the first start generates (32 random bytes, hex,
//     file mode 0600) and every later start reuses.
//   - When the config names no admin_tokens, the admin token is
//     $RECONCILER_ADMIN_TOKEN when set, otherwise <data>/admin_token, likewise.
//
// The log names the file, never the token: `curl -H "Authorization: Bearer
// $(cat data/token)" …`. A token file that group or others can read is
// refused, as ssh refuses such a key.
const (
	TokenFile      = "token"       // <data>/token: the default tenant's token
	AdminTokenFile = "admin_token" // <data>/admin_token: the admin token
	maxTokenFile   = 4 << 10
)

// EnsureTokens fills in the development tenant and admin tokens (see above)
// and re-validates, so a short or reused $RECONCILER_TOKEN is refused too.
// getenv reads RECONCILER_TOKEN and RECONCILER_ADMIN_TOKEN, rnd is the
// randomness of a generated token, and log says where each token came from.
func (c *Config) EnsureTokens(getenv func(string) string, rnd io.Reader, log *slog.Logger) error {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	if c.origin == nil {
		c.origin = newOrigin(c.File)
	}
	d := devTokens{getenv: getenv, rnd: rnd, log: log}
	if len(c.Tenants) == 0 {
		tok, where, err := d.token(EnvToken, filepath.Join(c.Data, TokenFile), "tenant "+DefaultTenant)
		if err != nil {
			return err
		}
		c.Tenants = []Tenant{{ID: DefaultTenant, Tokens: []string{tok}}}
		c.origin.src["tenants[0].tokens[0]"] = where
	} else if v := getenv(EnvToken); v != "" && !c.tenantToken(v) {
		// Only when the file does not use it itself (tokens: ["${RECONCILER_TOKEN}"]).
		log.Warn("RECONCILER_TOKEN is ignored: the config file names tenants")
	}
	if len(c.AdminTokens) == 0 {
		tok, where, err := d.token(EnvAdminToken, filepath.Join(c.Data, AdminTokenFile), "admin")
		if err != nil {
			return err
		}
		c.AdminTokens = []string{tok}
		c.origin.src["admin_tokens[0]"] = where
	}
	if err := c.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// devTokens is where EnsureTokens finds or makes a token.
type devTokens struct {
	getenv func(string) string
	rnd    io.Reader
	log    *slog.Logger
}

// token returns the token from env, else from (or newly written to) path,
// and where it came from for error messages.
func (d devTokens) token(env, path, who string) (tok, where string, err error) {
	if v := d.getenv(env); v != "" {
		d.log.Info("using token from the environment", "for", who, "env", env)
		return v, env, nil
	}
	tok, created, err := loadOrCreateToken(path, d.rnd)
	if err != nil {
		return "", "", err
	}
	if created {
		d.log.Info("generated token", "for", who, "file", path)
	} else {
		d.log.Info("using token file", "for", who, "file", path)
	}
	return tok, path, nil
}

// loadOrCreateToken reads the token at path, or creates it. The new file is
// written under a temporary name and hard-linked into place, so a second
// process starting at the same moment either wins or reads the complete
// token of the first, never a half-written one.
func loadOrCreateToken(path string, rnd io.Reader) (tok string, created bool, err error) {
	for range 2 {
		tok, err := readTokenFile(path)
		if err == nil {
			return tok, false, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", false, err
		}
		buf := make([]byte, 32)
		if _, err := io.ReadFull(rnd, buf); err != nil {
			return "", false, fmt.Errorf("generate token: %w", err)
		}
		tok = hex.EncodeToString(buf)
		err = writeTokenFile(path, tok)
		if err == nil {
			return tok, true, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", false, err
		}
		// Another process created it first: read theirs.
	}
	return "", false, fmt.Errorf("token file %s: created and removed concurrently", path)
}

func writeTokenFile(path, tok string) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*") // mode 0600
	if err != nil {
		return fmt.Errorf("write token file: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if _, err := f.WriteString(tok + "\n"); err != nil {
		f.Close()
		return fmt.Errorf("write token file: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write token file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write token file: %w", err)
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return err
		}
		// A file system without hard links: fall back to an exclusive create.
		return writeExclusive(path, tok)
	}
	return nil
}

func writeExclusive(path, tok string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return err
		}
		return fmt.Errorf("write token file: %w", err)
	}
	_, err = f.WriteString(tok + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write token file: %w", err)
	}
	return nil
}

func readTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err // fs.ErrNotExist is the caller's cue to create it
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("token file %s is open to group or others (mode %#o): chmod 600 it", path, perm)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	if len(b) > maxTokenFile {
		return "", fmt.Errorf("token file %s is larger than %d bytes", path, maxTokenFile)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty: delete it to generate a new token", path)
	}
	return tok, nil
}

// tenantToken reports whether tok is a token of one of the configured tenants.
func (c *Config) tenantToken(tok string) bool {
	for _, t := range c.Tenants {
		if slices.Contains(t.Tokens, tok) {
			return true
		}
	}
	return false
}
