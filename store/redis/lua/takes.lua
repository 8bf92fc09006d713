-- A flat script for the most common call: a batch made only of single-key
-- takes of fixed windows (not calendar ones), token buckets, GCRA and
-- shapers. It takes the ARGV and KEYS of main.lua and answers as main.lua
-- does, but defines nothing per call (Redis runs a script's whole body on
-- every call, and the prelude's and handlers' functions cost more than a
-- decision): the steps of fixed_window.lua's and bucket.lua's load,
-- expires, decide and save for one key, in local variables. The
-- differential test holds it to algo like the rest.

local floor, min, max, tonumber = math.floor, math.min, math.max, tonumber
local rcall, rpcall, spack, sunpack = redis.call, redis.pcall, struct.pack, struct.unpack
local MAXTIME, FIXED, SHAPER = 9007199254740991, 1, 6

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

local testTTL = tonumber(ARGV[2]) or 0
-- The limits in one flat list: kind, then limit, period, calendar (0) for
-- a fixed window, or rate, period, capacity, delay, initial level for a
-- bucket; at[i] is where limit i starts.
local specs, at, ai = {}, {}, 4
for i = 1, tonumber(ARGV[3]) do
  at[i] = #specs + 1
  local n = 6
  if tonumber(ARGV[ai]) == FIXED then n = 4 end
  for _ = 1, n do
    specs[#specs + 1] = tonumber(ARGV[ai])
    ai = ai + 1
  end
end

local out, o, servertime = {}, 0, nil
for g = 1, tonumber(ARGV[1]) do
  -- The group: 't', its time, 1, the limit's index, cost, lease, at.
  local t, minTTL = ARGV[ai + 1], 0
  if t == '' then
    if not servertime then
      local tm = rcall('TIME')
      servertime = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
    end
    t = servertime
  else
    t, minTTL = min(max(tonumber(t), 0), MAXTIME), testTTL
  end
  local j, cost, key = at[tonumber(ARGV[ai + 3])], tonumber(ARGV[ai + 4]), KEYS[g]
  ai = ai + 7
  local kind = specs[j]

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
    local limit, per = specs[j + 1], specs[j + 2]
    -- expires: the end of the counted window
    if b ~= 0 and a - (a - idiv(a, per) * per) + per <= t then a, b, c = 0, 0, 0 end
    -- decide
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
    local rate, per, cap, delayUnits, init = specs[j + 1], specs[j + 2], specs[j + 3], specs[j + 4], specs[j + 5]
    local capLevel = cap * per
    -- expires: when the bucket is full again
    if c ~= 0 then
      local need, full = capLevel - min(max(a, 0), capLevel), b
      if need > 0 then full = b + idiv(need + rate - 1, rate) end
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
          if now - b >= idiv(need + rate - 1, rate) then a = capLevel else a = a + (now - b) * rate end
        end
        b = now
      end
    end
    -- decide
    if cost > cap then
      retry = -1 -- never
    elseif a >= cost * per then
      allowed = 1
      if kind == SHAPER then
        local wait = capLevel - a - delayUnits * per
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
    rcall('DEL', key)
  else
    rcall('SET', key, spack('<Bddd', kind, a, b, c), 'PX', max(idiv(exp - t + 999, 1000), minTTL))
  end
  out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6], out[o + 7] =
    allowed, t, allowed, rem, retry, reset, delay
  o = o + 7
end
return out
