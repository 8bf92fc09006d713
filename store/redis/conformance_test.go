package redis

import (
	"testing"

	"github.com/floodgate/floodgate/store/storetest"
)

func TestConformanceStandalone(t *testing.T) {
	storetest.Run(t, harness(redisURL(t)))
}

func TestConformanceCluster(t *testing.T) {
	storetest.Run(t, harness(clusterURL(t)))
}

func TestConformanceSentinel(t *testing.T) {
	storetest.Run(t, harness(sentinelURL(t)))
}
