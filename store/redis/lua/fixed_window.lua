-- Fixed window (algo/window.go). State (see load3): kind 1, A = start of
-- the current window (µs), B = units counted in it, C = the latest time seen.
-- Params: limit, period (µs), calendar (0 none, 1 month, 2 year).

local DAY = 86400000000

-- daysFromCivil and civilFromDays are H. Hinnant's proleptic Gregorian
-- calendar conversions, in exact integer arithmetic.
local function daysFromCivil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = idiv(y, 400)
  local yoe = y - era * 400
  local mp = (m + 9) % 12
  local doy = idiv(153 * mp + 2, 5) + d - 1
  local doe = yoe * 365 + idiv(yoe, 4) - idiv(yoe, 100) + doy
  return era * 146097 + doe - 719468
end

local function civilFromDays(z)
  z = z + 719468
  local era = idiv(z, 146097)
  local doe = z - era * 146097
  local yoe = idiv(doe - idiv(doe, 1460) + idiv(doe, 36524) - idiv(doe, 146096), 365)
  local y = yoe + era * 400
  local doy = doe - (365 * yoe + idiv(yoe, 4) - idiv(yoe, 100))
  local mp = idiv(5 * doy + 2, 153)
  local m = mp < 10 and mp + 3 or mp - 9
  if m <= 2 then y = y + 1 end
  return y, m
end

local function windowBounds(p, now)
  if p.cal == 0 then
    local start = now - fmod(now, p.per)
    return start, start + p.per
  end
  local y, m = civilFromDays(idiv(now, DAY))
  if p.cal == 2 then
    return daysFromCivil(y, 1, 1) * DAY, daysFromCivil(y + 1, 1, 1) * DAY
  end
  local ny, nm = y, m + 1
  if nm > 12 then ny, nm = y + 1, 1 end
  return daysFromCivil(y, m, 1) * DAY, daysFromCivil(ny, nm, 1) * DAY
end

ALG[1] = {
  np = 3,
  parse = function(a, i)
    return { limit = tonumber(a[i]), per = tonumber(a[i + 1]), cal = tonumber(a[i + 2]) }
  end,
  load = function(key, p, ro)
    return load3(key, 1)
  end,
  expires = function(st, p)
    if st.b == 0 then return 0 end
    local _, stop = windowBounds(p, st.a)
    return stop
  end,
  fresh = sfresh,
  decide = function(st, p, now, cost, lease, commit)
    if now < st.c then now = st.c else st.c = now end
    local start, stop = windowBounds(p, now)
    -- The time left, summed from the difference: stop itself may lie past
    -- 2^53 µs (a period near 2^53 µs), where a double rounds it.
    local left = stop - now
    if p.cal == 0 then left = (start - now) + p.per end
    if st.a ~= start or st.b < 0 then st.a, st.b = start, 0 end
    local allowed, rem, retry, reset = 0, 0, 0, 0
    if cost > p.limit then
      rem, retry = max(p.limit - st.b, 0), NEVER
    elseif st.b + cost <= p.limit then
      allowed = 1
      if commit then st.b = st.b + cost end
      rem = p.limit - st.b
      if not commit then rem = rem - cost end
    else
      rem, retry = max(p.limit - st.b, 0), micros(left)
    end
    if st.b > 0 or (allowed == 1 and cost > 0) then reset = micros(left) end
    return allowed, rem, retry, reset, 0, now
  end,
  refund = function(st, p, now, at, cost)
    local start = windowBounds(p, at)
    if st.a ~= start then return end
    st.b = st.b - cost
    if st.b < 0 then st.b = 0 end
  end,
  save = function(st, p, now)
    save3(st, 1, now, ALG[1].expires(st, p))
  end,
}
