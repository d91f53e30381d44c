package ledger

// The rules and limits below are unexported because only the ledger's own
// flows use them; the black-box tests (package ledger_test) test them
// directly under these names.
var (
	CanTransition    = canTransition
	CheckCompensable = checkCompensable
	Escalate         = escalate
	ValidateTool     = validateTool
)

const (
	MaxRequestBody  = maxRequestBody
	MaxAlertsPerRow = maxAlertsPerRow
)

// AfterOrphans is afterOrphans.
func (r *ClaimResult) AfterOrphans() { r.afterOrphans() }
