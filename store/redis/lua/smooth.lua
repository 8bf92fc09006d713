-- Guava's SmoothBursty and SmoothWarmingUp (algo/smooth.go). State (see
-- load3): the kind (7 or 8), A = stored permits (a float), B = the next
-- free ticket (µs; 0 marks a fresh key), C = the latest time seen.
-- Params (floats precomputed by Go exactly as algo.Compile does): stable
-- and coolDown intervals (µs per permit), maxPermits, threshold, slope,
-- maxWait (µs), maxCost (algo.Limit.MaxCost: a larger cost never
-- passes), and retain (µs a full SmoothBursty state is kept; 0 for
-- SmoothWarmup, whose fresh state is full).

local WARMUP = 8

local function toWait(p, stored, take)
  if p.kind ~= WARMUP then return 0 end
  local us = 0
  local above = stored - p.threshold
  if above > 0 then
    local t = min(above, take)
    local length = p.stable + above * p.slope + p.stable + (above - t) * p.slope
    us = trunc(t * length / 2.0)
    take = take - t
  end
  return us + trunc(p.stable * take)
end

local function resync(st, p, now)
  if st.b == 0 then
    st.b = now
    local stored = 0
    if p.kind == WARMUP then stored = p.maxPermits end -- a new limiter starts cold
    st.a = stored
    return stored
  end
  local stored = st.a
  if not (stored >= 0) then stored = 0 end -- NaN or negative: not our state
  stored = min(stored, p.maxPermits)
  if now > st.b then
    stored = min(p.maxPermits, stored + (now - st.b) / p.coolDown)
    st.b = now
    st.a = stored
  end
  return stored
end

local function untilFull(p, nxt, stored)
  return nxt + trunc(ceil((p.maxPermits - stored) * p.coolDown))
end

-- resetAfter is untilFull - now, summed from the difference: the instant
-- itself may lie past 2^53 µs (a ticket near MAXTIME, years of stored
-- permits), where a double rounds it, while the span is below it, as in
-- algo's int64s.
local function resetAfter(p, nxt, stored, now)
  return micros((nxt - now) + trunc(ceil((p.maxPermits - stored) * p.coolDown)))
end

-- free counts the unit requests that would pass at now without waiting:
-- SmoothBursty's stored permits are free, SmoothWarmup's are not, and one
-- more passes if the ticket nxt is free.
local function free(p, nxt, stored, now)
  local rem = 0
  if p.kind ~= WARMUP then rem = trunc(stored) end
  if nxt <= now then rem = rem + 1 end
  return rem
end

local h = {
  np = 8,
  -- restore3: a reservation's rollback restores the three fields (see
  -- undoTokens in main.lua) rather than refunding, which errs strict.
  restore3 = true,
  parse = function(a, i)
    return {
      stable = tonumber(a[i]), coolDown = tonumber(a[i + 1]), maxPermits = tonumber(a[i + 2]),
      threshold = tonumber(a[i + 3]), slope = tonumber(a[i + 4]), maxWait = tonumber(a[i + 5]),
      maxCost = tonumber(a[i + 6]), retain = tonumber(a[i + 7]),
    }
  end,
  load = function(key, p, ro)
    return load3(key, p.kind)
  end,
  expires = function(st, p)
    if st.b == 0 then return 0 end
    return retained(untilFull(p, st.b, st.a), p.retain)
  end,
  fresh = sfresh,
  decide = function(st, p, now, cost, lease, commit)
    if not commit and st.b == 0 then
      -- Peek must not start a fresh key's clock.
      st = { a = st.a, b = st.b, c = st.c }
    end
    if now < st.c then now = st.c else st.c = now end
    local stored = resync(st, p, now)
    if cost > p.maxCost then
      -- More than a period's permits (or the burst): never, rather than
      -- a debt that would hold the key for what the cost is worth.
      return 0, free(p, st.b, stored, now), NEVER, resetAfter(p, st.b, stored, now), 0, now
    end
    local wait = st.b - now
    if wait > p.maxWait then
      return 0, 0, micros(wait - p.maxWait), resetAfter(p, st.b, stored, now), 0, now
    end
    local spend = min(cost, stored)
    local fresh = cost - spend
    -- Like Guava's saturated add: a huge cost pushes the ticket to the
    -- end of time (saturated at each step, as algo: a sum past 2^53
    -- would be rounded).
    local nxt = min(st.b + toWait(p, stored, spend), MAXTIME)
    local pay = fresh * p.stable
    if pay < MAXTIME - nxt then
      nxt = nxt + trunc(pay)
    else
      nxt = MAXTIME
    end
    stored = stored - spend
    if commit then
      st.b = nxt
      st.a = stored
    end
    return 1, free(p, nxt, stored, now), 0, resetAfter(p, nxt, stored, now), micros(wait), now
  end,
  refund = function(st, p, now, at, cost)
    -- Give back the ticket time the cost is worth at the stable rate,
    -- less what the permits stored since at are worth (algo's
    -- smoothRefund), never moving the ticket before the latest time seen.
    if st.b == 0 or st.b <= st.c then return end
    local back = cost * p.stable
    local dt = max(now, st.c) - at
    if dt > 0 then
      back = back - dt * p.stable / p.coolDown
      if back <= 0 then return end
    end
    if back < st.b - st.c then
      st.b = st.b - trunc(back)
    else
      st.b = st.c
    end
  end,
  save = function(st, p, now)
    local exp = 0
    if st.b ~= 0 then exp = retained(untilFull(p, st.b, st.a), p.retain) end
    save3(st, p.kind, now, exp)
  end,
}
ALG[7], ALG[8] = h, h
