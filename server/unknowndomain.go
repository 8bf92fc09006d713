package server

import (
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/floodgate/floodgate/internal/causelog"
	"github.com/floodgate/floodgate/policy"
)

// unknownDomainEvery is how often at most the server logs that decisions
// named a domain its configuration does not have.
const unknownDomainEvery = time.Minute

// unknownDomains reports Envoy decisions (gRPC and /json) for domains the
// configuration does not have. Envoy's API answers them OK with no limit,
// as envoyproxy/ratelimit does, so a domain mistyped in Envoy's filter
// (or in a case that differs) lifts every limit without an error: the
// server says so in a WARN at most once a minute, naming the last such
// domain and how many decisions there were since the last line.
type unknownDomains struct {
	mu    sync.Mutex
	lines causelog.Limiter // one cause, every unknown domain's (set by New)
}

// note counts a decision for the unknown domain and logs the WARN when
// the last one is a minute old (or there was none).
func (u *unknownDomains) note(log *slog.Logger, cfg *policy.Config, domain string, now time.Time) {
	u.mu.Lock()
	ok, skipped := u.lines.Pass("", now)
	u.mu.Unlock()
	if !ok {
		return
	}
	n := skipped + 1 // this decision and those left out since the last line
	shown := domain
	if len(shown) > 64 {
		shown = shown[:64] + "…"
	}
	hint := ""
	for _, d := range cfg.Domains() {
		if strings.EqualFold(d.Name, domain) {
			hint = " (did you mean " + strconv.Quote(d.Name) + "? domains are case-sensitive)"
			break
		}
	}
	log.Warn("decisions for a domain the configuration does not have are answered OK with no limit, as envoyproxy/ratelimit answers them: check the domain in Envoy's rate limit filter"+hint,
		"domain", shown, "decisions", n, "configured", domainList(cfg))
}
