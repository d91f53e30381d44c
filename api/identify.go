package api

// Identity is what a token may do, as another in-process surface (the ops
// console) needs to know it: the role, the tenant of a tenant or approver
// token, and the token's fingerprint (what approvals record; never the
// token).
type Identity struct {
	// Role is "admin", "approver" or "tenant".
	Role string
	// Tenant is the token's tenant; empty for an admin token.
	Tenant string
	// Fingerprint names the token in records and logs (tok_ and 16 hex).
	Fingerprint string
}

// Identify looks a bearer token up as the API's own authentication does
// (constant time over every configured token), so a console session signed
// in with it acts with exactly the rights the token has on the API.
func (s *Server) Identify(token string) (Identity, bool) {
	p, ok := s.auth.lookup(token)
	if !ok {
		return Identity{}, false
	}
	id := Identity{Tenant: p.tenant, Fingerprint: p.fp}
	switch p.role {
	case roleAdmin:
		id.Role = "admin"
	case roleApprover:
		id.Role = "approver"
	default:
		id.Role = "tenant"
	}
	return id, true
}
