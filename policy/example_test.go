package policy_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate/floodgate/policy"
	"github.com/floodgate/floodgate/store/memory"
)

const exampleConfig = `
domain: api
descriptors:
  - key: api_key
    rate_limit:
      name: per-key
      unit: minute
      requests_per_unit: 2
`

// Parse compiles a configuration; Dump shows what it compiled to.
func ExampleParse() {
	cfg, err := policy.Parse("rules.yaml", []byte(exampleConfig))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(cfg.Dump())
	// Output:
	// domain api
	//   api_key -> [per-key] fixed_window 2/minute @5
}

// Every problem of a configuration comes back at once, each with its line.
func ExampleParse_problems() {
	_, err := policy.Parse("rules.yaml", []byte(`
domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: fortnight, requests_per_unit: -1, algoritm: gcra}
`))
	fmt.Println(err)
	// Output:
	// rules.yaml:5: unknown field "algoritm" in rate_limit (did you mean "algorithm"?)
	// rules.yaml:5: invalid rate limit unit "fortnight" (want second, minute, hour, day, week, month or year); for another length, write period: in place of unit (such as period: 14d or period: 90s)
	// rules.yaml:5: requests_per_unit must be >= 0, got -1
}

// An Engine decides requests through a store; here the memory store with a
// fixed clock.
func ExampleEngine_Decide() {
	cfg, _ := policy.Parse("rules.yaml", []byte(exampleConfig))
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	st, _ := memory.New(memory.WithClock(func() time.Time { return now }))
	defer st.Close()
	engine, _ := policy.NewEngine(cfg, st)

	req := policy.Request{Domain: "api", Descriptors: []policy.Descriptor{
		{Entries: []policy.Entry{{Key: "api_key", Value: "k-123"}}},
	}}
	for i := 0; i < 3; i++ {
		resp, _ := engine.Decide(context.Background(), req)
		s := resp.Statuses[0]
		fmt.Printf("%s rule=%s remaining=%d retry=%v\n", resp.Code, s.Rule, s.Decision.Remaining, s.Decision.RetryAfter)
	}
	// Output:
	// OK rule=per-key remaining=1 retry=0s
	// OK rule=per-key remaining=0 retry=0s
	// OVER_LIMIT rule=per-key remaining=0 retry=1m0s
}

// A runtime override changes a rule's limit at once, until removed.
func ExampleEngine_SetOverride() {
	cfg, _ := policy.Parse("rules.yaml", []byte(exampleConfig))
	st, _ := memory.New()
	defer st.Close()
	engine, _ := policy.NewEngine(cfg, st)
	if err := engine.SetOverride("api", "per-key", policy.Override{RequestsPerUnit: 100}); err != nil {
		fmt.Println(err)
	}
	fmt.Println(engine.EffectiveLimit("api", "per-key"))
	if _, err := engine.RemoveOverride("api", "per-key"); err != nil {
		fmt.Println(err)
	}
	fmt.Println(engine.EffectiveLimit("api", "per-key"))
	// Output:
	// fixed_window 100/1m0s
	// fixed_window 2/1m0s
}
