-- Sliding log (algo/sliding.go). State: a sorted set with one member per
-- admitted unit, scored by its admission time (µs) and named
-- "<time>:<seq>" (seq is zero-padded and numbers the units admitted at the
-- same µs contiguously, so members stay unique), plus META scored by the
-- latest time seen, which is never below an entry's time and so sorts
-- after every entry. The window at now is (now - period, now]; entries
-- before it are removed by takes (not by a read-only peek, which counts
-- inside the window instead). The set never holds more than limit
-- entries.
-- Params: limit, period (µs).

-- logAt returns the members stamped at (sorted by seq), META excluded.
local function logAt(key, at)
  local s = num(at)
  local m = rcall('ZRANGEBYSCORE', key, s, s)
  if m[#m] == META then m[#m] = nil end
  return m
end

-- slidingLogRefund is algo's slidingLogRefund: while the state's time is
-- below at + period (no entry at or after at has left the window), it
-- removes the oldest cost entries stamped at or after at (a take may be
-- stamped at the state's later time while its caller was told at);
-- otherwise the newest cost entries stamped at. Of a time's entries it
-- removes the newest (highest seq), so that the seqs left stay 1..n and a
-- take's next members do not reuse one.
local function slidingLogRefund(st, p, at, cost)
  local key, last, n = st.key, at, cost
  if st.c - at < p.per then
    -- The oldest cost entries from at on (all of them for a cost past
    -- 1e9, more than a set holds, which Redis would pass LIMIT as a
    -- double); META sorts after every entry.
    local lim = cost
    if lim > 1e9 then lim = -1 end
    local r = rcall('ZRANGEBYSCORE', key, num(at), '+inf', 'WITHSCORES', 'LIMIT', 0, lim)
    if r[#r - 1] == META then
      r[#r], r[#r - 1] = nil, nil
    end
    if #r == 0 then return end
    -- Every time before the last one's is taken whole; of the last one,
    -- its newest n.
    last, n = tonumber(r[#r]), 0
    local drop = {}
    for i = 1, #r, 2 do
      if tonumber(r[i + 1]) == last then
        n = n + 1
      else
        drop[#drop + 1] = r[i]
      end
    end
    if #drop > 0 then zrem(key, drop) end
  end
  local m = logAt(key, last)
  local drop = {}
  for i = #m, max(1, #m - n + 1), -1 do
    drop[#drop + 1] = m[i]
  end
  if #drop > 0 then zrem(key, drop) end
end

-- logNewest returns the time of the newest entry, or nil.
local function logNewest(st)
  local r = rcall('ZREVRANGE', st.key, 0, 1, 'WITHSCORES')
  for i = 1, #r, 2 do
    if r[i] ~= META then return tonumber(r[i + 1]) end
  end
  return nil
end

ALG[2] = {
  np = 2,
  parse = function(a, i)
    return { limit = tonumber(a[i]), per = tonumber(a[i + 1]) }
  end,
  load = function(key, p, ro, keep)
    return zload(key, ro, keep)
  end,
  expires = function(st, p)
    if st.gone then return 0 end
    local t = logNewest(st)
    if t then return t + p.per end
    return 0
  end,
  fresh = zfresh,
  decide = function(st, p, now, cost, lease, commit)
    local key = st.key
    if st.other then zclaim(st) end
    if now < st.c then now = st.c else st.c = now end
    local lo = now - p.per
    -- Count and decide before writing, so that the take's first write is
    -- its ZADD (see zwrite); entries at or before lo are skipped, then
    -- trimmed.
    local n = zcount(st, lo)
    local allowed, rem, retry, reset = 0, 0, 0, 0
    local members
    if cost > p.limit then
      rem, retry = max(p.limit - n, 0), NEVER
    elseif n + cost <= p.limit then
      allowed, rem = 1, p.limit - n - cost
      if commit and cost > 0 then
        local seq = #logAt(key, now)
        local ts = num(now)
        members = {}
        for i = 1, cost do
          members[i] = fmt('%s:%07d', ts, seq + i)
        end
      end
    else
      rem = max(p.limit - n, 0)
      -- The oldest n + cost - limit units must leave the window first.
      -- (Summed as period - age: the entry's time + period may lie past
      -- 2^53 µs, where a double rounds it.)
      retry = micros(max(p.per - (now - zscoreabove(key, lo, n + cost - p.limit)), 1))
    end
    if not st.ro then
      zwrite(st, now, members)
      rcall('ZREMRANGEBYSCORE', key, '-inf', num(lo))
    end
    if members then n = n + cost end
    if n > 0 then reset = micros(p.per - (now - zscoreabove(key, lo, n))) end
    if allowed == 1 and cost > 0 and not commit then
      reset = micros(p.per) -- what take would report
    end
    return allowed, rem, retry, reset, 0, now
  end,
  refund = function(st, p, now, at, cost)
    slidingLogRefund(st, p, at, cost)
  end,
  rollback = function(st, p, now, at, cost, lease)
    slidingLogRefund(st, p, at, cost)
  end,
  save = function(st, p, now)
    local t = logNewest(st)
    zsave(st, now, t and t + p.per or 0)
  end,
}
