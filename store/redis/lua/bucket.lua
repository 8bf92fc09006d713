-- Token bucket, GCRA and Shaper (algo/bucket.go). State (see load3): the
-- kind (4, 5 or 6), A = level in unit·µs, B = time of the last
-- update (µs), C = 1 + the time of the latest take that charged (µs), 1
-- for a key in use that none has charged yet (0 marks a fresh key).
-- Params: rate (limit per period), period (µs), capacity, delay (shaper),
-- initial level in units (-1: full), retain (µs a full state is kept; 0
-- for a bucket that starts full).

local SHAPER = 6

local h = {
  np = 6,
  parse = function(a, i)
    return {
      rate = tonumber(a[i]), per = tonumber(a[i + 1]), cap = tonumber(a[i + 2]),
      delay = tonumber(a[i + 3]), init = tonumber(a[i + 4]), retain = tonumber(a[i + 5]),
    }
  end,
}

local function refill(st, p, now)
  local per, capLevel = p.per, p.cap * p.per
  if st.c == 0 then
    st.a = capLevel
    if p.init >= 0 then st.a = p.init * per end
    st.b, st.c = now, 1
    return now
  end
  -- A level outside [0, capacity] comes from a limit whose burst was
  -- lowered since: the smaller capacity rules.
  st.a = min(max(st.a, 0), capLevel)
  if now <= st.b then return st.b end
  local need = capLevel - st.a
  if need > 0 then
    local dt = now - st.b
    if dt >= cdiv(need, p.rate) then
      st.a = capLevel
    else
      st.a = st.a + dt * p.rate
    end
  end
  st.b = now
  return now
end

h.load = function(key, p, ro)
  return load3(key, p.kind)
end
h.expires = function(st, p)
  if st.c == 0 then return 0 end
  local capLevel = p.cap * p.per
  return retained(st.b + cdiv(capLevel - min(max(st.a, 0), capLevel), p.rate), p.retain)
end
h.fresh = sfresh
h.decide = function(st, p, now, cost, lease, commit)
  if not commit and st.c == 0 then
    -- Peek must not start a fresh key's clock.
    st = { a = st.a, b = st.b, c = st.c }
  end
  now = refill(st, p, now)
  local per, rate, capLevel = p.per, p.rate, p.cap * p.per
  local level = st.a
  local allowed, retry, delay = 0, 0, 0
  if cost > p.cap then
    retry = NEVER
  elseif level >= cost * per then
    allowed = 1
    if p.kind == SHAPER then
      delay = micros(cdiv(capLevel - level - p.delay * per, rate))
    end
    level = level - cost * per
    if commit then
      st.a = level
      if cost > 0 then st.c = now + 1 end
    end
  else
    retry = micros(cdiv(cost * per - level, rate))
  end
  return allowed, tdiv(level, per), retry, micros(cdiv(capLevel - level, rate)), delay, now
end
h.refund = function(st, p, now, at, cost)
  if st.c == 0 then return end
  now = refill(st, p, now)
  local capLevel = p.cap * p.per
  if cost > p.cap then cost = p.cap end
  local back = cost * p.per
  -- After a take since at, the cost less the refill since at (see
  -- algo's bucketRefund).
  local dt = now - at
  if st.c - 1 > at and dt > 0 then
    if dt >= cdiv(back, p.rate) then return end
    back = back - dt * p.rate
  end
  st.a = st.a + back
  if st.a > capLevel then st.a = capLevel end
end
h.save = function(st, p, now)
  save3(st, p.kind, now, h.expires(st, p))
end

ALG[4], ALG[5], ALG[6] = h, h, h
