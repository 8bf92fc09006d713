-- A lone take: one request on one key, of a fixed window (not a calendar
-- one), a token bucket, GCRA or a shaper, the call a serial caller makes.
-- takes.lua's steps for one key, with nothing else: no loop, no table
-- but the reply, arguments in the order they are used. Redis runs a
-- script's whole body on every call, so what is not here costs nothing.
--
-- KEYS[1]: the key. ARGV: cost; the time (µs; '' for the server's TIME);
-- the TTL floor (ms) for an explicit time (see WithTestClock); the limit,
-- packed ('<Bddddd', see loneSpec): its kind, then limit, period (µs) for
-- a fixed window, or rate, period (µs), capacity, delay, initial level
-- (-1: full) for a bucket. One struct.unpack costs the server less than
-- six arguments and their tonumber()s.
--
-- The reply: the time used, then the decision as main.lua writes one:
-- allowed (0/1), remaining, retry-after (µs, -1 for never), reset-after
-- (µs), delay (µs). The differential test
-- holds it to algo like the rest.

local floor, min, max, tonumber = math.floor, math.min, math.max, tonumber

-- idiv is prelude.lua's: floor(a / b), exact below 2^53.
local function idiv(a, b)
  local q = floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

local key, cost, t, minTTL = KEYS[1], tonumber(ARGV[1]), ARGV[2], 0
if t == '' then
  local tm = redis.call('TIME')
  t = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
else
  t, minTTL = min(max(tonumber(t), 0), 9007199254740991), tonumber(ARGV[3])
end
local kind, p1, p2, p3, p4, p5 = struct.unpack('<Bddddd', ARGV[4])

-- load: a state of another kind or type reads as fresh
local a, b, c = 0, 0, 0
local v = redis.pcall('GET', key)
if type(v) == 'string' and #v == 25 then
  local k
  k, a, b, c = struct.unpack('<Bddd', v)
  if k ~= kind then a, b, c = 0, 0, 0 end
end

local allowed, rem, retry, reset, delay, exp = 0, 0, 0, 0, 0, 0
if kind == 1 then
  -- fixed_window.lua: A = window start, B = count, C = latest time seen
  local limit, per = p1, p2
  -- expires: the end of the counted window
  if b ~= 0 and a - (a - idiv(a, per) * per) + per <= t then a, b, c = 0, 0, 0 end
  local now = t
  if now < c then now = c else c = now end
  local start = now - (now - idiv(now, per) * per)
  local stop = start + per
  if a ~= start or b < 0 then a, b = start, 0 end
  if cost > limit then
    rem, retry = max(limit - b, 0), -1
  elseif b + cost <= limit then
    allowed, b = 1, b + cost
    rem = limit - b
  else
    rem, retry = max(limit - b, 0), max(stop - now, 0)
  end
  if b > 0 or (allowed == 1 and cost > 0) then reset = max(stop - now, 0) end
  if b ~= 0 then exp = stop end
else
  -- bucket.lua: A = level in unit·µs, B = last update, C = 1 once used
  local rate, per, cap = p1, p2, p3
  local capLevel = cap * per
  -- expires: when the bucket is full again
  if c ~= 0 then
    local need, full = capLevel - min(max(a, 0), capLevel), b
    if need > 0 then full = b + idiv(need + rate - 1, rate) end
    if full <= t then a, b, c = 0, 0, 0 end
  end
  -- refill
  if c == 0 then
    a = capLevel
    local init = p5
    if init >= 0 then a = init * per end
    b, c = t, 1
  else
    a = min(max(a, 0), capLevel)
    if t > b then
      local need = capLevel - a
      if need > 0 then
        if t - b >= idiv(need + rate - 1, rate) then a = capLevel else a = a + (t - b) * rate end
      end
      b = t
    end
  end
  -- decide
  if cost > cap then
    retry = -1 -- never
  elseif a >= cost * per then
    allowed = 1
    if kind == 6 then -- a shaper's delay
      local wait = capLevel - a - p4 * per
      if wait > 0 then delay = idiv(wait + rate - 1, rate) end
    end
    a = a - cost * per
  else
    retry = idiv(cost * per - a + rate - 1, rate)
  end
  rem = idiv(a, per)
  if capLevel - a > 0 then reset = idiv(capLevel - a + rate - 1, rate) end
  exp = b + reset
end

-- save: until the state's ExpiresAt, or not at all
if exp <= t then
  redis.call('DEL', key)
else
  redis.call('SET', key, struct.pack('<Bddd', kind, a, b, c), 'PX', max(idiv(exp - t + 999, 1000), minTTL))
end
return { t, allowed, rem, retry, reset, delay }
