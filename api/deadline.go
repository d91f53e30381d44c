package api

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

// deadlines bounds how long one request may hold its connection: the body
// must be in within bodyTimeout of the headers, the answer written within
// answer after that. http.Server's ReadHeaderTimeout covers only the
// headers, so without this a client that sends them and then a byte every
// few seconds holds a connection and a goroutine for as long as it likes;
// the webhook routes, which face the internet, share this echo and so these
// deadlines. A long poll moves the write deadline (extendForWait).
//
// Only a request with a body gets a read deadline. Once a body has been
// read to its end, net/http clears the read deadline and goes on reading in
// the background, to notice a client that goes away; a request without one
// is in that state from the start. A read deadline passing there would
// cancel the request's context under a handler still at work.
//
// Deadlines are wall-clock times on the connection, so they come from
// time.Now, not the injected clock that stamps rows. Setting one fails only
// on a writer that is not a connection (httptest.ResponseRecorder) or a
// connection already closed; neither needs a deadline.
func (s *Server) deadlines(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		s.setDeadlines(c)
		return next(c)
	}
}

// setDeadlines is deadlines' work (dispatch calls it directly).
func (s *Server) setDeadlines(c echo.Context) {
	now := time.Now()
	rc := http.NewResponseController(c.Response())
	_ = rc.SetWriteDeadline(now.Add(s.bodyTimeout + s.answer))
	if body := c.Request().Body; body != nil && body != http.NoBody {
		_ = rc.SetReadDeadline(now.Add(s.bodyTimeout))
	}
}

// extendForWait gives a claim about to long-poll for up to wait its wait
// on top of the usual answer time. Its body has been read (to the end: a
// longer one is refused), so there is no read deadline left to move.
func (s *Server) extendForWait(c echo.Context, wait time.Duration) {
	_ = http.NewResponseController(c.Response()).SetWriteDeadline(time.Now().Add(wait + s.answer))
}
