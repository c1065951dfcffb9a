package graph

import (
	"html"
	"strings"
)

// renderHTML turns a plain-text issue body into HTML: blank-line separated
// paragraphs, every character escaped, so no body can inject markup.
func renderHTML(body string) string {
	var b strings.Builder
	for _, p := range strings.Split(strings.ReplaceAll(body, "\r\n", "\n"), "\n\n") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		b.WriteString("<p>")
		b.WriteString(html.EscapeString(p))
		b.WriteString("</p>")
	}
	return b.String()
}
