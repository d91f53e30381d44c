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
	if c.Request().URL.RawQuery != "" || c.Echo().Debug {
		return c.JSON(code, v)
	}
	res := c.Response()
	if h := res.Header(); h.Get(echo.HeaderContentType) == "" {
		h.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	}
	res.Status = code
	return c.Echo().JSONSerializer.Serialize(c, v, "")
}
