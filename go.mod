module github.com/agentledger/reconciler

go 1.26.8
