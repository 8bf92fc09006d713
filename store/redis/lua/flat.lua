-- One single-key take of a fixed window (not a calendar one), a token
-- bucket, GCRA or a shaper: fixed_window.lua's and bucket.lua's load,
-- expires, decide and save in local variables, without main.lua's
-- machinery. take.lua and takes.lua include it where they say
-- "--#include flat.lua" (see script.go), so the steps are written once.
--
-- In: key, kind, cost, t (µs), minTTL (ms), p1..p6 (limit, period for a
-- fixed window; rate, period, capacity, delay, initial level, retain for a
-- bucket), the locals rcall, rpcall, spack, sunpack, idiv, min, max and
-- the constants MAXTIME, FIXED, SHAPER. Out: allowed, rem, retry, reset, delay, and
-- the key saved or deleted.

-- load: a state of another kind or type reads as fresh
local a, b, c = 0, 0, 0
local v = rpcall('GET', key)
if type(v) == 'string' and #v == 25 then
  local k
  k, a, b, c = sunpack('<Bddd', v)
  if k ~= kind then a, b, c = 0, 0, 0 end
end

local allowed, rem, retry, reset, delay, exp = 0, 0, 0, 0, 0, 0
if kind == FIXED then
  -- fixed_window.lua: A = window start, B = count, C = latest time seen
  local limit, per = p1, p2
  -- expires: the end of the counted window
  if b ~= 0 and a - (a - idiv(a, per) * per) + per <= t then a, b, c = 0, 0, 0 end
  -- decide
  local now = t
  if now < c then now = c else c = now end
  local start = now - (now - idiv(now, per) * per)
  -- the time left, summed from the difference: start + per may lie past
  -- 2^53 µs (a period near 2^53 µs), where a double rounds it
  local left = (start - now) + per
  if a ~= start or b < 0 then a, b = start, 0 end
  if cost > limit then
    rem, retry = max(limit - b, 0), -1
  elseif b + cost <= limit then
    allowed, b = 1, b + cost
    rem = limit - b
  else
    rem, retry = max(limit - b, 0), max(left, 0)
  end
  if b > 0 or (allowed == 1 and cost > 0) then reset = max(left, 0) end
  if b ~= 0 then exp = start + per end
else
  -- bucket.lua: A = level in unit·µs, B = last update, C = 1 + the latest
  -- take's time (1 once used)
  local rate, per, cap, delayUnits, init, retain = p1, p2, p3, p4, p5, p6
  local capLevel = cap * per
  -- expires: when the bucket is full again, plus retain (see retained in
  -- prelude.lua) for one that starts short
  if c ~= 0 then
    local need, full = capLevel - min(max(a, 0), capLevel), b
    if need > 0 then full = b + idiv(need - 1, rate) + 1 end
    if retain > 0 then
      if full >= MAXTIME - retain then full = max(full, MAXTIME) else full = full + retain end
    end
    if full <= t then a, b, c = 0, 0, 0 end
  end
  -- refill
  local now = t
  if c == 0 then
    a = capLevel
    if init >= 0 then a = init * per end
    b, c = now, 1
  else
    a = min(max(a, 0), capLevel)
    if now > b then
      local need = capLevel - a
      if need > 0 then
        if now - b >= (idiv(need - 1, rate) + 1) then a = capLevel else a = a + (now - b) * rate end
      end
      b = now
    end
  end
  -- decide (a ceiling division is floor((x - 1) / rate) + 1, as prelude.lua's
  -- cdiv: x + rate - 1 may lie past 2^53)
  if cost > cap then
    retry = -1 -- never
  elseif a >= cost * per then
    allowed = 1
    if kind == SHAPER then
      local wait = capLevel - a - delayUnits * per
      if wait > 0 then delay = idiv(wait - 1, rate) + 1 end
    end
    a = a - cost * per
    if cost > 0 then c = max(now, b) + 1 end
  else
    retry = idiv(cost * per - a - 1, rate) + 1
  end
  rem = idiv(a, per)
  if capLevel - a > 0 then reset = idiv(capLevel - a - 1, rate) + 1 end
  exp = b + reset
  if retain > 0 then
    if exp >= MAXTIME - retain then exp = max(exp, MAXTIME) else exp = exp + retain end
  end
end

-- save: until the state's ExpiresAt, or not at all. A key that does not
-- exist (v false) is not deleted: a DEL, even of nothing, is a write, and
-- on a full Redis the first write of a call lets the later ones through
-- (see getstring in prelude.lua); takes.lua runs several keys in one call.
if exp <= t then
  if v then rcall('DEL', key) end
else
  rcall('SET', key, spack('<Bddd', kind, a, b, c), 'PX', max(idiv(exp - t + 999, 1000), minTTL))
end
