package api

import (
	"github.com/labstack/echo/v4"
)

// writeJSON answers v as c.JSON does, without its query parse: echo's
// JSON looks for ?pretty in c.QueryParams(), which parses the query into a
// new map on every response, even of a request that has none. A request
// with a query (or a Debug echo) still goes through c.JSON, so ?pretty
// indents as it always did.
func writeJSON(c echo.Context, code int, v any) error {
	if viaEchoJSON(c) {
		return c.JSON(code, v)
	}
	startJSON(c, code)
	return c.Echo().JSONSerializer.Serialize(c, v, "")
}

// viaEchoJSON reports whether an answer goes through c.JSON: a request
// with a query (which may ask for ?pretty) or a Debug echo.
func viaEchoJSON(c echo.Context) bool {
	return c.Request().URL.RawQuery != "" || c.Echo().Debug
}

// startJSON sets a JSON answer's content type (unless a handler set one)
// and its status, as c.JSON does before it writes.
func startJSON(c echo.Context, code int) *echo.Response {
	res := c.Response()
	if h := res.Header(); h.Get(echo.HeaderContentType) == "" {
		h.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	}
	res.Status = code
	return res
}
