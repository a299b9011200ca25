module cozy-backups/e2e/go-reference

go 1.26

require (
	github.com/go-task/slim-sprig/v3 v3.0.0
	github.com/robfig/cron/v3 v3.0.1
	sigs.k8s.io/json v0.0.0-20260909141634-11ed52e25bc5
)
