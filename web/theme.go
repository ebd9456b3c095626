package web

import (
	"context"
	"net/http"
	"time"
)

// The console's colour theme. With no choice made, the browser's
// prefers-color-scheme decides (console.css). The header's switch chooses
// light or dark, remembered in a cookie, so the server draws every page in
// the chosen theme from its first byte: no flash of the other theme and no
// inline script. The switch is a POST form (setTheme), so it works without
// JavaScript; console.js sets the same cookie and switches in place.

// themeCookie holds "light" or "dark". It is not HttpOnly: console.js writes
// it. Any other value reads as no choice.
const themeCookie = "switchyard_theme"

// themeYear is how long the choice is remembered.
const themeYear = 365 * 24 * time.Hour

type themeKey struct{}

// themeOf is the theme the request's cookie chose: "light", "dark", or ""
// to follow the system.
func themeOf(r *http.Request) string {
	c, err := r.Cookie(themeCookie)
	if err != nil {
		return ""
	}
	switch c.Value {
	case "light", "dark":
		return c.Value
	}
	return ""
}

// withTheme is the request's context carrying its theme, for the layout.
func withTheme(r *http.Request) context.Context {
	return context.WithValue(r.Context(), themeKey{}, themeOf(r))
}

// themeIn is the theme the page is drawn in ("" follows the system).
func themeIn(ctx context.Context) string {
	t, _ := ctx.Value(themeKey{}).(string)
	return t
}

// setTheme remembers the theme chosen with the header's switch — "light",
// "dark", or "system" to forget the choice — and goes back to the page.
func (s *Server) setTheme(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		s.problem(w, r, http.StatusBadRequest, "", "The form could not be read.")
		return
	}
	c := &http.Cookie{
		Name: themeCookie, Path: "/admin", Secure: isHTTPS(r), SameSite: http.SameSiteLaxMode,
	}
	switch v := r.PostForm.Get("theme"); v {
	case "light", "dark":
		c.Value, c.MaxAge = v, int(themeYear.Seconds())
	case "system":
		c.MaxAge, c.Expires = -1, time.Unix(1, 0)
	default:
		s.problem(w, r, http.StatusBadRequest, "", "The theme is light, dark or system.")
		return
	}
	http.SetCookie(w, c)
	http.Redirect(w, r, safeNext(r.PostForm.Get("next")), http.StatusSeeOther)
}
