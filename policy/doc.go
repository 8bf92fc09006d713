// Package policy turns configuration into decisions: it loads the YAML
// rules (a superset of envoyproxy/ratelimit's format), compiles them,
// matches request descriptors against them and decides through a
// store.Store, all descriptors of a request all or nothing.
//
// # Entry points
//
//   - [Load] (a file or a directory) and [Parse] (bytes) return a [*Config]
//     or [Problems]: every problem of the configuration as "file:line:
//     message", not just the first. [Validate] is `floodgate validate`.
//     [Config.Dump] prints the compiled rules as stable text.
//   - [NewEngine] decides with a Config and a store. [Engine.Decide]
//     charges, [Engine.Peek] only looks, [Engine.DecideWait] also waits
//     for rules whose strategy is wait, [Engine.Release] gives back
//     concurrency slots, [Engine.Refund] everything an admitted request
//     charged (one that does not go on). The Engine is a [Decider], what
//     the server, the middleware and the gateway call. [Turns] holds
//     admitted requests for a shaper's Delay, a turn given up moving
//     those behind it up: DecideWait and the middleware hold with it.
//   - Limits that change while running: [Engine.Reload], [Engine.Watch]
//     (hot reload), [Engine.SetOverride] (runtime overrides),
//     [Engine.SetRateScale], [Engine.Observe] and [Engine.RunAdaptive]
//     (adaptive limits driven by package adaptive).
//
// In a directory, Load reads every *.yaml and *.yml file and skips names
// starting with '.' (.gitkeep, .rules.yaml.swp, a ConfigMap's ..data)
// without a word. Every other file is skipped with a warning naming it
// (it may hold rules meant to load: rules.yml.bak, rules.json,
// rules.yaml.txt, a ConfigMap key named config), except those plainly not
// rules, skipped quietly: documentation (*.md, *.markdown, *.rst, *.adoc,
// *.asciidoc, but not rules.yaml.md; README, LICENSE, LICENCE, NOTICE,
// COPYING, AUTHORS, OWNERS, CODEOWNERS, CHANGELOG, in any case, bare or
// with .txt), Go files (*.go) and editor backups (a name ending in ~, or
// #…#). A directory of files but no YAML one is an error naming them.
//
// docs/CONFIG.md is the field-by-field reference of the configuration.
// Packages that own a domain-level section policy cannot import (package
// dimension's description of how HTTP requests become descriptors) register
// it with [RegisterSection]; it is then checked with the same file:line
// problems and kept in [Domain].Sections.
//
// # Matching, as envoyproxy/ratelimit does
//
// A request descriptor is a list of entries (key, value). It is matched
// level by level down the configured descriptor tree: at each level the most
// specific sibling wins — an exact value, else the first wildcard value
// ("prefix*", or '*'s anywhere: "/api*v1") in file order, else the value-less key, which matches any
// value and keys its counter by the value. A rule applies only if it sits
// exactly at the descriptor's last entry; a descriptor longer or shorter
// than the configured path matches nothing; there is no backtracking to a
// less specific sibling when a deeper level fails. A descriptor that
// matches nothing, or an unlimited rule, is OK without a store call; a rule
// with requests_per_unit: 0 refuses everything without one. A matched rule
// whose name another matched rule of the same request replaces does not
// apply. Shadow rules are decided and reported but never refuse. A
// per-request limit (Descriptor.Limit) replaces the matched rule's limit
// for that descriptor, and only it: the rule's ancestors in a hierarchy
// are still taken, and it is enforced even on a shadow rule (the global
// shadow mode still covers it). Keys are compared as structured (key, value) pairs, not as
// Envoy's "key_value" strings, so a key containing '_' cannot collide with
// a key and value.
//
// # All or nothing
//
// Every limit of every descriptor of a request is taken in one
// store.Take: when any refuses, none is charged. (envoyproxy/ratelimit
// charges the others anyway.) A key is charged once per request, with the
// largest cost any descriptor asks of it. A request refused by a deny rule
// charges nothing. Shadow limits are taken after the enforcing ones, each
// on its own, and only for admitted requests; for refused ones they are
// peeked.
//
// # Hierarchies, borrowing and priority classes
//
// A rule in hierarchy mode (hierarchy: true on the domain or a descriptor,
// inherited downwards) also takes from its parent: the nearest enclosing
// descriptor with a limit, or the domain's own rate_limit at the top.
// A request for (tenant=acme, user=bob, path=/x) thus takes from the
// endpoint, user, tenant and global limits at once, keyed by the values on
// its path, all or nothing.
//
// Borrowing is HTB's rate and ceil on top of that. A rule with ceil: C
// (greater than its requests_per_unit R) has two keys: its rate (R) and its
// ceiling (C), which counts all of its traffic. A request takes rate,
// ceiling and the ancestors. When the rate is the only refusal, the request
// is tried again without the rate — and with the parent's lend pool when
// the parent sets lendable: S (a key of S × the parent's capacity, rounded
// down, that counts borrowed traffic only; a share of less than one unit is
// an error at load, and an override or scale making it so is refused). So a
// child gets R of its own; beyond R it borrows up to C while the parent
// (and its lend pool) has capacity left; the parent is charged for all of
// it and so never exceeds its budget.
// Borrowing is first come, first served: a borrower can use capacity that
// an idle sibling would otherwise get; lendable bounds how much of the
// parent borrowing may use in total, keeping the rest for traffic within
// its rate.
//
// Priority classes are declared per domain (priorities: [critical, high,
// normal, low], highest first). A limit's reserve: {normal: 0.1, low: 0.3}
// keeps shares of it away from lower classes: a class-k request also takes
// from one extra key per class j at or above k that has a reserve, a key of
// ⌊capacity × (1 − reserve_j)⌋ that counts the traffic of class j and all
// below it. Low priority is shed first: above, low traffic is refused once
// low alone used 70% of the limit, normal and low together 90%, while the
// classes with no reserve can still use the whole of it. A request's class
// is Request.Priority (matched ignoring case and surrounding spaces; a
// class the domain does not declare is the default_priority, and sets
// Response.PriorityUnknown), else the highest class a matched rule's
// priority field assigns (a rule that another matched rule replaces
// assigns none), else the domain's default_priority.
//
// # Strategies on excess
//
// Response.Strategy says what a refused request should do: reject (the
// default), wait (every refusing rule waits and the retry fits their
// max_wait; Response.Delay is the wait), degrade (run Response.Fallback) or,
// on an admitted request, shadow (a shadow limit would have refused).
// Reject wins over degrade, degrade over wait.
//
// # Snapshots and concurrency
//
// An Engine is safe for concurrent use. The configuration, the overrides
// and the adaptive scales are compiled into one immutable snapshot that a
// decision reads once (an atomic pointer), so a request never sees half of
// a change, and writers (reload, overrides, scales) are serialised. Store
// keys carry the limit's algorithm and period, so a reload that changes
// them starts fresh state instead of misreading the old; a change of quota
// keeps the counts.
//
// # Clock
//
// Decisions use the store's clock (memory: its injectable clock; Redis: the
// server's TIME). The Engine's own clock (WithClock) only picks the calendar
// month or year whose length a response states: the one whose end is the
// key's stored reset (so instances whose clocks differ by minutes across a
// month's end state the same window), or for a key with nothing stored the
// one holding the clock's time. Waiting uses the runtime's timers, which
// testing/synctest fakes.
package policy
