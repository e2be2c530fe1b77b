package stack

import (
	"context"
	"crypto/tls"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Endpoint is an S3 endpoint with one access key pair.
type Endpoint struct {
	URL       string
	AccessKey string
	SecretKey string
	Region    string
}

// S3Client is a path-style aws-sdk-go-v2 client for e. It builds its config by
// hand rather than with LoadDefaultConfig, which fails on machines that set
// AWS_CA_BUNDLE.
func (e Endpoint) S3Client(opts ...func(*s3.Options)) *s3.Client {
	region := e.Region
	if region == "" {
		region = "us-east-1"
	}
	cfg := aws.Config{
		Region:      region,
		Credentials: credentials.NewStaticCredentialsProvider(e.AccessKey, e.SecretKey, ""),
		HTTPClient: &http.Client{Transport: &http.Transport{
			TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, // test stacks use self-signed certificates
			MaxIdleConnsPerHost: 64,
		}},
	}
	return s3.NewFromConfig(cfg, append([]func(*s3.Options){func(o *s3.Options) {
		o.BaseEndpoint = aws.String(e.URL)
		o.UsePathStyle = true
	}}, opts...)...)
}

// waitS3 polls ListBuckets until the store answers it, the process dies, or the
// limit passes.
func waitS3(ctx context.Context, e Endpoint, p *proc, limit time.Duration) error {
	c := e.S3Client(func(o *s3.Options) { o.RetryMaxAttempts = 1 })
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, last = c.ListBuckets(cctx, &s3.ListBucketsInput{})
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-p.done:
			return &exitedError{p.err}
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return last
}

type exitedError struct{ err error }

func (e *exitedError) Error() string { return "exited during start-up: " + errString(e.err) }

func errString(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}
