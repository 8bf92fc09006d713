-- A flat script for the most common call: a batch made only of single-key
-- takes of the token bucket, GCRA and shaper. It takes the ARGV and KEYS
-- of main.lua and answers as main.lua does, but defines nothing per call
-- (Redis runs a script's whole body on every call, and the prelude's and
-- handlers' functions cost more than a decision): the steps of
-- bucket.lua's load, expires, decide and save for one key, in local
-- variables. The differential test holds it to algo like the rest.

local floor, min, max, tonumber = math.floor, math.min, math.max, tonumber
local rcall, rpcall, spack, sunpack = redis.call, redis.pcall, struct.pack, struct.unpack
local MAXTIME, SHAPER = 9007199254740991, 6

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
-- The limits, six numbers each (kind, rate, period, capacity, delay,
-- initial level), in one flat list.
local specs, ai = {}, 4
for j = 1, tonumber(ARGV[3]) * 6 do
  specs[j] = tonumber(ARGV[ai])
  ai = ai + 1
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
  local j, cost, key = tonumber(ARGV[ai + 3]) * 6 - 5, tonumber(ARGV[ai + 4]), KEYS[g]
  ai = ai + 7
  local kind, rate, per, cap, delayUnits, init = specs[j], specs[j + 1], specs[j + 2], specs[j + 3], specs[j + 4], specs[j + 5]
  local capLevel = cap * per

  -- load: a state of another kind or type reads as fresh
  local a, b, c = 0, 0, 0
  local v = rpcall('GET', key)
  if type(v) == 'string' and #v == 25 then
    local k
    k, a, b, c = sunpack('<Bddd', v)
    if k ~= kind then a, b, c = 0, 0, 0 end
  end
  -- expires: a state past its ExpiresAt reads as fresh
  if c ~= 0 then
    local need, exp = capLevel - min(max(a, 0), capLevel), b
    if need > 0 then exp = b + idiv(need + rate - 1, rate) end
    if exp <= t then a, b, c = 0, 0, 0 end
  end
  -- refill (now is the state's time, t the call's)
  local now = t
  if c == 0 then
    a = capLevel
    if init >= 0 then a = init * per end
    b, c = now, 1
  else
    a = min(max(a, 0), capLevel)
    if now <= b then
      now = b
    else
      local need = capLevel - a
      if need > 0 then
        if now - b >= idiv(need + rate - 1, rate) then a = capLevel else a = a + (now - b) * rate end
      end
      b = now
    end
  end
  -- decide
  local allowed, retry, delay = 0, 0, 0
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
  local reset = 0
  if capLevel - a > 0 then reset = idiv(capLevel - a + rate - 1, rate) end
  -- save: the state expires when the bucket is full again
  local exp = b + reset
  if exp <= t then
    rcall('DEL', key)
  else
    rcall('SET', key, spack('<Bddd', kind, a, b, c), 'PX', max(idiv(exp - t + 999, 1000), minTTL))
  end
  out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6], out[o + 7] =
    allowed, t, allowed, idiv(a, per), retry, reset, delay
  o = o + 7
end
return out
