-- Sliding window counter (algo/sliding.go). State: packed binary (see
-- load3) of kind 3, A = the latest time seen (µs), whose sub-window
-- (A ÷ sub-window length) is the current one, then the ring of N+1
-- sub-window counts, slot i at position floorMod(i, N+1).
-- Params: limit, sub-window length (µs), N.

local function slot(p, i)
  return fmod(i, p.n + 1)
end

-- advance moves the state to now, or to the latest time seen if later,
-- zeroing the sub-windows that fell out of the ring.
local function advance(st, p, now)
  if now < st.a then now = st.a end
  local cur, idx = tdiv(st.a, p.sub), tdiv(now, p.sub)
  for j = 0, min(idx - cur, p.n + 1) - 1 do
    st.ring[slot(p, idx - j)] = 0
  end
  st.a = now
  return now, idx
end

-- windowSums returns, for the current sub-window idx, the count of the N
-- newest sub-windows and the count of the oldest, weighted one.
local function windowSums(st, p, idx)
  local full = 0
  for j = 0, p.n - 1 do full = full + st.ring[slot(p, idx - j)] end
  return full, st.ring[slot(p, idx - p.n)]
end

local function estimate(full, old, sub, elapsed)
  return full + old * (sub - elapsed) / sub
end

-- remaining is algo's slidingRemaining: the largest m with e + m <= limit,
-- the admission test against e (after an admitted request, the estimate
-- that counts it). floor(limit - e) alone can be one off, as limit - e and
-- e + m round differently, so it is stepped by one; the same operations in
-- the same order as algo, so the doubles agree.
local function remaining(limit, e)
  local m = floor(limit - e)
  if e + (m + 1) <= limit then
    m = m + 1
  elseif m > 0 and e + m > limit then
    m = m - 1
  end
  return trunc(m)
end

local function slidingExpiry(st, p)
  local n, cur = p.n, tdiv(st.a, p.sub)
  for j = 0, n do
    if st.ring[slot(p, cur - j)] ~= 0 then
      return (cur - j + n + 1) * p.sub
    end
  end
  return 0
end

-- slidingResetAfter is slidingExpiry - now (0 when nothing is counted),
-- summed from the difference: the instant itself may lie past 2^53 µs,
-- where a double rounds it, and the span below it, as in algo's int64s.
local function slidingResetAfter(st, p, now)
  local n, cur = p.n, tdiv(st.a, p.sub)
  for j = 0, n do
    if st.ring[slot(p, cur - j)] ~= 0 then
      return micros(((cur - j) * p.sub - now) + (n + 1) * p.sub)
    end
  end
  return 0
end

-- slidingRetry is algo's: walk the sub-windows from the current one;
-- within one the estimate only falls, so search the first microsecond
-- that fits (after trying the closed form).
local function slidingRetry(st, p, idx, now, cost)
  local sub, n, limit = p.sub, p.n, p.limit
  local full, old = windowSums(st, p, idx)
  for k = 0, n + 1 do
    if k > 0 then
      -- Sub-window idx+k: sub-window idx+k-n becomes the oldest and
      -- leaves the full sum; newer ones are empty.
      old = 0
      if k <= n then old = st.ring[slot(p, idx + k - n)] end
      full = full - old
    end
    if full + cost <= limit and estimate(full, old, sub, sub - 1) + cost <= limit then
      local lo, hi = 0, sub - 1
      if k == 0 then lo = now - idx * sub end
      local e = nil
      if old > 0 then
        local x = (limit - cost - full) * sub / old
        local g = sub - trunc(x)
        if g > lo and g < hi and estimate(full, old, sub, g) + cost <= limit
          and estimate(full, old, sub, g - 1) + cost > limit then
          e = g
        end
      end
      if not e then
        while lo < hi do
          local mid = lo + idiv(hi - lo, 2)
          if estimate(full, old, sub, mid) + cost <= limit then hi = mid else lo = mid + 1 end
        end
        e = lo
      end
      return (idx * sub - now) + k * sub + e
    end
  end
  return (idx * sub - now) + (n + 1) * sub
end

ALG[3] = {
  np = 3,
  parse = function(a, i)
    local n = tonumber(a[i + 2])
    return {
      limit = tonumber(a[i]), sub = tonumber(a[i + 1]), n = n,
      fmt = '<Bd' .. string.rep('d', n + 1), size = 1 + 8 * (n + 2),
    }
  end,
  load = function(key, p, ro)
    local st = { key = key, a = 0, ring = {} }
    for i = 0, p.n do st.ring[i] = 0 end
    local v
    v, st.had = getstring(key)
    if v and #v >= 9 then
      local k, a = sunpack('<Bd', v)
      if k == 3 then
        st.a = a
        -- A ring of another length (N changed since) starts empty.
        if #v == p.size then
          local vals = { sunpack(p.fmt, v) }
          for i = 0, p.n do st.ring[i] = vals[i + 3] end
        end
      end
    end
    return st
  end,
  expires = slidingExpiry,
  fresh = sfresh,
  decide = function(st, p, now, cost, lease, commit)
    local sub = p.sub
    local idx
    now, idx = advance(st, p, now)
    local elapsed = now - idx * sub
    local full, old = windowSums(st, p, idx)
    local est = estimate(full, old, sub, elapsed)
    local limit = p.limit
    local allowed, rem, retry, reset = 0, 0, 0, 0
    if est + cost <= limit then
      allowed = 1
      if commit then
        local s = slot(p, idx)
        st.ring[s] = st.ring[s] + cost
      end
      rem = remaining(limit, estimate(full + cost, old, sub, elapsed))
    elseif cost > limit then
      retry, rem = NEVER, remaining(limit, est)
    else
      rem = remaining(limit, est)
      retry = micros(slidingRetry(st, p, idx, now, cost))
    end
    -- (Only counts this package did not write could take Remaining
    -- above the limit.)
    rem = min(max(rem, 0), p.limit)
    reset = slidingResetAfter(st, p, now)
    if allowed == 1 and cost > 0 and not commit then
      reset = micros((idx * sub - now) + (p.n + 1) * sub) -- what take would report
    end
    return allowed, rem, retry, reset, 0, now
  end,
  refund = function(st, p, now, at, cost)
    local i, cur = tdiv(at, p.sub), tdiv(st.a, p.sub)
    if i > cur or i < cur - p.n then return end
    local s = slot(p, i)
    st.ring[s] = st.ring[s] - cost
    if st.ring[s] < 0 then st.ring[s] = 0 end
  end,
  save = function(st, p, now)
    local exp = slidingExpiry(st, p)
    if exp <= now then
      if st.had ~= false then rcall('DEL', st.key) end
      st.had = false
      return
    end
    local ring = {}
    for i = 0, p.n do ring[i + 1] = st.ring[i] end
    rcall('SET', st.key, spack(p.fmt, 3, st.a, unpack(ring)), 'PX', ttlms(now, exp))
    st.had = true
  end,
}
