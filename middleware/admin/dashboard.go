package admin

import (
	"embed"
	"net/http"
)

//go:embed dashboard
var dashboardFS embed.FS

// dashboardFiles maps the dashboard's paths to its files and their types.
var dashboardFiles = map[string]struct{ file, typ string }{
	"/admin/":                     {"dashboard/index.html", "text/html; charset=utf-8"},
	"/admin/assets/dashboard.js":  {"dashboard/dashboard.js", "text/javascript; charset=utf-8"},
	"/admin/assets/dashboard.css": {"dashboard/dashboard.css", "text/css; charset=utf-8"},
	"/admin/assets/icon.svg":      {"dashboard/icon.svg", "image/svg+xml"},
}

// dashboardCSP lets the page load only its own assets and fetch only its
// own origin: nothing from outside, even if a figure held markup.
const dashboardCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// serveDashboard answers a GET or HEAD of the dashboard's page or one of
// its assets, and reports whether r was one.
func serveDashboard(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	f, ok := dashboardFiles[r.URL.Path]
	if !ok {
		return false
	}
	b, err := dashboardFS.ReadFile(f.file)
	if err != nil { // embedded: cannot happen
		writeError(w, http.StatusInternalServerError, "the dashboard is missing from the binary")
		return true
	}
	hd := w.Header()
	hd.Set("Content-Type", f.typ)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Content-Security-Policy", dashboardCSP)
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(b)
	}
	return true
}
