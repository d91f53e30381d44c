package console

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// page is what every template gets: the layout's parts and the page's Data.
type page struct {
	Title string
	// Nav names the active navigation entry.
	Nav string
	// Actor, Role, Tenant describe the signed-in person (empty on sign-in).
	Actor, Role, OwnTenant string
	Admin                  bool
	CSRF                   string
	Flash                  []flash
	// Tenants the person may look at, and the one this page is about.
	Tenants []string
	Tenant  string
	Data    any
}

func (c *Console) newPage(s *session, title, nav, tenant string, data any) page {
	p := page{Title: title, Nav: nav, Tenant: tenant, Data: data}
	if s != nil {
		p.Actor, p.Role, p.OwnTenant, p.Admin, p.CSRF = s.actor, s.id.Role, s.id.Tenant, s.admin(), s.csrf
		p.Flash = c.sessions.takeFlash(s)
		p.Tenants = c.visibleTenants(s)
	}
	return p
}

var funcs = template.FuncMap{
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"iso": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return roughDuration(now.Sub(t))
	},
	"rowURL": func(tenant, key string) string {
		return "/console/row?" + url.Values{"tenant": {tenant}, "key": {key}}.Encode()
	},
	"runURL": func(tenant, run string) string {
		return "/console/run?" + url.Values{"tenant": {tenant}, "run_id": {run}}.Encode()
	},
	"expandURL": func(tenant, section string) string {
		return "/console/attention?" + url.Values{"tenant": {tenant}, "all": {section}}.Encode() + "#" + section
	},
	"tenantURL": func(path, tenant string) string {
		return path + "?" + url.Values{"tenant": {tenant}}.Encode()
	},
	"short": func(s string) string {
		if len(s) > 16 {
			return s[:12] + "…"
		}
		return s
	},
	"deref": func(b *bool) bool { return b != nil && *b },
	"inc":   func(i int) int { return i + 1 },
	"yesno": func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	},
}

// roughDuration is a duration as a person reads it on a queue: 3m, 2h, 4d.
func roughDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "in " + roughDuration(-d)
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

var pageNames = []string{"signin", "attention", "row", "run", "search", "tools", "error"}

func parseTemplates() (map[string]*template.Template, error) {
	out := make(map[string]*template.Template, len(pageNames))
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, err
		}
		out[name] = t
	}
	return out, nil
}

// render writes a page; a template error is a 500 with nothing half-written.
func (c *Console) render(w http.ResponseWriter, status int, name string, p page) {
	var buf bytes.Buffer
	if err := c.pages[name].Execute(&buf, p); err != nil {
		c.log.Error("console: render", "page", name, "err", err)
		http.Error(w, "the page could not be drawn", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail shows an error page (a bad tenant, a store that is down) in the layout.
func (c *Console) fail(w http.ResponseWriter, s *session, status int, msg string) {
	c.render(w, status, "error", c.newPage(s, "Error", "", "", msg))
}

// visibleTenants are the tenants the session may look at.
func (c *Console) visibleTenants(s *session) []string {
	if s.admin() {
		return c.o.Tenants
	}
	return []string{s.id.Tenant}
}

// tenantOf picks the tenant a page is about: ?tenant= when the session may
// see it, else the session's first. A tenant it may not see is refused
// (403), never silently swapped: a link from another person must not show
// a different tenant's data under the same URL.
func (c *Console) tenantOf(r *http.Request, s *session) (string, bool) {
	t := strings.TrimSpace(r.URL.Query().Get("tenant"))
	vis := c.visibleTenants(s)
	if t == "" {
		return vis[0], true
	}
	for _, v := range vis {
		if v == t {
			return t, true
		}
	}
	return "", false
}

// linkFrom fills a link template's placeholder, escaped as a path segment.
func linkFrom(tmpl, placeholder, value string) string {
	if tmpl == "" || value == "" {
		return ""
	}
	return strings.ReplaceAll(tmpl, placeholder, url.PathEscape(value))
}
