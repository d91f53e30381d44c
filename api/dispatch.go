package api

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// dispatch is Handler: echo's ServeHTTP with the server's own middleware
// called directly. echo v4 wraps the routed handler in every e.Use
// middleware, and every route's middleware, anew on each request — one
// closure allocated per layer per request, six on a claim. Here the
// server-wide chain (deadlines, observe, nameSpan, strictQuery: the same
// one routes registers with e.Use, in the same order) is plain calls, and
// each route's own middleware was applied once, when it was registered
// (chain). Routes other packages add through Echo() pass through the same
// chain. Echo().ServeHTTP still serves the same behaviour, through e.Use.
//
// The server registers no host routers and no Pre middleware; should
// someone add a host router, dispatch hands the request to echo.
type dispatch struct{ s *Server }

func (d dispatch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e := d.s.e
	if len(e.Routers()) > 0 {
		e.ServeHTTP(w, r)
		return
	}
	c := e.AcquireContext()
	c.Reset(r, w)
	e.Router().Find(r.Method, echo.GetPath(r), c)
	d.s.setDeadlines(c)
	if err := d.s.observed(c, d.s.routed); err != nil {
		e.HTTPErrorHandler(err, c)
	}
	e.ReleaseContext(c)
}

// belowObserve is the server-wide middleware under observe, then the
// routed handler (Server.routed).
func (s *Server) belowObserve(c echo.Context) error {
	if s.tracing {
		s.nameSpanOf(c)
	}
	if err := parseableQuery(c); err != nil {
		return err
	}
	return c.Handler()(c)
}

// chain applies a route's middleware to its handler once, at
// registration, in echo's order (the first is the outermost).
func chain(h echo.HandlerFunc, mw ...echo.MiddlewareFunc) echo.HandlerFunc {
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h
}
