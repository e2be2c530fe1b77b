package stack

// The environment `fencegate dev exec` exports to the command it runs (the
// test suite): where the run's PostgreSQL cluster and SeaweedFS are. The
// tests' side (internal/testenv) reads them; the binary's side only sets them,
// which is why they live here and not in the test package.
const (
	EnvDatabaseURL = "DATABASE_URL"
	EnvS3Endpoint  = "FENCEGATE_TEST_S3_ENDPOINT"
	EnvS3AccessKey = "FENCEGATE_TEST_S3_ACCESS_KEY"
	EnvS3SecretKey = "FENCEGATE_TEST_S3_SECRET_KEY"
)
